"""What-if replay: how much batch capacity a colocation config reclaims, at what risk to online pods.

`engine.Replay` runs the services' own code in one process on a simulated clock; `runner`
sweeps configurations side by side; `report` writes the table, the recommendation and the
plots; `checkconfig` finds settings that fight each other.
"""
