"""One judge per fact: pure rules (facts in, a verdict out) that every side calls.

The agent's checks on a live node, the bundle diagnosis of recorded outputs and preflight's P2P
decision judge the same platform facts; each fact has one rule here, so the three cannot drift:
- iommu.py: is GPU DMA translated by an IOMMU (iommu=pt missing)?
- bar.py: does a GPU's BAR expose its whole VRAM (large BAR, needed for P2P)?
- acs.py: does a switch between two GPUs redirect their peer traffic (ACS)?
- link.py: did a card's PCIe link train at what both its ends support?
- kernel_log.py: what amdgpu's kernel-log trouble means (data/manifest.yaml kernel_log_signatures).
Standard library only: the agent runs these on nodes. Each verdict names its reason code
(data/codes.yaml); the caller adds its own evidence (a file and line, a sysfs path).
"""
