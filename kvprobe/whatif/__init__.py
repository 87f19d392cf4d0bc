"""What-if fixes: each miss gets a concrete change, priced by re-simulating the requests it can change."""
