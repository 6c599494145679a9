"""The loopback address the pod runner gives a kwok node that runs host-network pods (`runner.node_ip`)."""

from __future__ import annotations

import ipaddress

from e2e.cluster.controlplane import pod_cidr_for
from e2e.serving.runner import node_ip


def test_each_node_gets_its_own_address_at_the_top_of_the_pod_network() -> None:
    cidr = "127.19.0.0/16"
    assert node_ip("gpu-node-0", cidr) == "127.19.255.1"
    assert node_ip("gpu-node-17", cidr) == "127.19.255.18"
    addresses = {node_ip(f"gpu-node-{i}", cidr) for i in range(254)}
    assert len(addresses) == 254
    network = ipaddress.ip_network(cidr)
    assert all(ipaddress.ip_address(a) in network and ipaddress.ip_address(a).is_loopback for a in addresses)


def test_other_names_get_a_stable_address_in_the_same_range() -> None:
    cidr = pod_cidr_for(17379)
    first = node_ip("worker-a", cidr)
    assert first == node_ip("worker-a", cidr)
    assert ipaddress.ip_address(first) in ipaddress.ip_network(cidr)
    assert first.split(".")[2] == "255"
    assert node_ip("gpu-node-300", cidr).split(".")[2] == "255"  # an index past the /24 falls back to the hash
