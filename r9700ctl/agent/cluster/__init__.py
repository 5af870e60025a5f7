"""The node's side of `r9700ctl validate --cluster`: standard library (and torch for the collectives).

Shipped in the agent's archive (r9700ctl/agentpack.py) and run by the r9700_validate role's
cluster tasks, one process per node per phase (`python3 -m r9700ctl.agent.cluster PHASE --plan
FILE --out FILE`). Each phase writes one JSON document; the controller (r9700ctl/cluster/) judges.

  netfacts.py   phase 1: the node's cluster interface, routes to the peers, MTU, speed, RDMA GIDs,
                memlock, clock, host name resolution, firewall, versions (no GPU, no torch)
  torchinfo.py  phase 1 in the runtime (the ROCm image or the host's python): torch, HIP/RCCL, GPUs
  pairs.py      phase 2: disjoint pairs in rounds: DF ping at the MTU, TCP to the rendezvous port and
                to an ephemeral one, iperf3 both ways (no GPU)
  probes.py     the commands behind pairs.py and their parsers (ping, iperf3)
  launch.py     torchrun under a step's deadline; processes.py kills every process of a step by pid
  smoke.py      phase 3: one torchrun worker per node: gloo all-reduce, then one RCCL/NCCL element
  collective.py phase 4: the agent's all-reduce sweep across nodes (r9700ctl/agent/kernels/collective.py)
"""
