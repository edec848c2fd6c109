"""Implementations the suite judges in its own tests: deliberately wrong ones, each a correct kernel with one defect."""
