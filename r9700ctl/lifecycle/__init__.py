"""Upgrade, rollback and uninstall: plans, batches and gates on top of the provisioning roles."""
