"""Reading the host: /proc, cgroupfs, sysfs and systemctl, below both the sources
(which turn readings into signals) and the actions (which check their targets)."""
