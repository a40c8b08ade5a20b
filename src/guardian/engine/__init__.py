"""The pure engine: rules' lifecycles and bounds over snapshots, with their history.
Time is the snapshot's; nothing here reads the host."""
