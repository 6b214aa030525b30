"""`leakwatch plan`: what a model profile fits on its card (planner), from the profile alone."""
