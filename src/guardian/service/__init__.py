"""The daemon: its loop, systemd notifications, wake-ups and the one-instance lock."""
