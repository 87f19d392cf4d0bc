"""What-if fixes: each miss gets a concrete change, priced by re-simulating the whole trace with it."""
