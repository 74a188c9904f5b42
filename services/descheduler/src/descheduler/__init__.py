"""descheduler: LowNodeLoad rebalancing that moves pods off hot nodes safely."""
