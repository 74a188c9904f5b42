"""Node QoS manager: strategies plan cgroup writes and evictions as data; one executor applies them."""
