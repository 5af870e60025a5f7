"""The on-node validation agent.

Runs ON a node with the standard library and PyTorch only; it never imports the
controller's modules (anything outside r9700ctl.agent).
"""
