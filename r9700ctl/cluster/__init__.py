"""`r9700ctl validate INVENTORY --cluster`: can these nodes run one job together, and if not, why?

The use case (service.py) runs phases that stop early with the cause, each through Ansible (the
r9700_validate role's cluster tasks, one async task per node) and each judged here:
  1. facts      (facts.py)     every node's cluster NIC, routes, MTU, versions, host name: nodes
                               that differ where they must agree FAIL, the differing nodes named
  2. network    (network.py)   disjoint pairs in round-robin rounds: DF ping at the MTU, TCP to the
                               rendezvous port and to an ephemeral one, iperf3; a node x node matrix
  3. rendezvous (rendezvous.py) torchrun across all nodes: gloo all-reduce, then one RCCL element
  4. collective (collective.py) the agent's all-reduce across each pair, then the whole cluster
Isolation (isolation.py) reads each pairwise phase's outcomes: a node is blamed only when it fails
with two or more good partners; two nodes failing only with each other point to their link.
Thresholds: data/thresholds.yaml `cluster.*` (limits.py); reason codes: data/codes.yaml.
The node side is r9700ctl/agent/cluster (standard library + torch, packed with the agent).
"""
