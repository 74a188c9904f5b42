"""Real-mode readers: /proc for the node, cgroup v1/v2 trees for pods and containers."""
