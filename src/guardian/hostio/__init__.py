"""The only code that touches the host: /proc, sysfs and cgroupfs, /dev/kmsg, the ETHTOOL
ioctl, textfile-collector files, the records guardian keeps, systemctl and systemd's bus.
Below both the sources (which turn readings into signals) and the actions (which check
and change their targets); tests/unit/test_no_direct_io.py keeps file access out of those."""
