"""Reading a job's log: byte offsets, the terminal screen it was printed on, the watch of its directory."""
