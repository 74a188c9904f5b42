"""The CPU allocator (koord-scheduler's NodeNUMAResource takeCPUs) on tables of topologies.

Topologies are written as Koordinator's tests write them, (sockets, NUMA nodes per socket, cores
per NUMA node, threads per core), numbered consecutively: a core's threads adjacent, then cores,
then NUMA nodes, then sockets. (2, 2, 8, 2): core k = CPUs 2k, 2k+1; NUMA node n = CPUs 16n..16n+15;
socket s = NUMA nodes 2s, 2s+1.
"""

import pytest
from koordcommon.cpus import Topology, format_cpuset, parse_cpuset
from scheduler_extender.core.cpu_allocator import REASON_NOT_ENOUGH, REASON_NUMA, REASON_SMT, allocate, take_cpus

FULL, SPREAD = "FullPCPUs", "SpreadByPCPUs"
MOST, LEAST = "MostAllocated", "LeastAllocated"


def free(topo, taken):
    return topo.ids() - set(parse_cpuset(taken))


# Koordinator's own cases (cpu_accumulator_test.go), NUMA MostAllocated
REFERENCE = [
    ((1, 1, 4, 2), "", 2, FULL, "0-1"),
    ((1, 1, 4, 2), "0-1", 2, FULL, "2-3"),
    ((2, 1, 4, 2), "", 8, FULL, "0-7"),
    ((2, 1, 4, 2), "", 12, FULL, "0-11"),
    ((2, 1, 4, 2), "0-1", 8, FULL, "8-15"),
    ((2, 2, 4, 2), "0-5,16-23", 6, FULL, "24-29"),
    ((2, 2, 4, 2), "0-5,16-23", 12, FULL, "6-15,24-25"),
    ((2, 2, 4, 2), "0-3,8-11", 4, FULL, "4-7"),
    ((2, 2, 2, 2), "0,2,4,8,12", 4, FULL, "10-11,14-15"),
    ((2, 2, 2, 2), "0,2,4,8,10,12", 6, FULL, "5-7,13-15"),
    ((2, 2, 2, 2), "0,2,4,8-10,12", 6, FULL, "6-7,11,13-15"),
    ((1, 1, 4, 2), "", 4, SPREAD, "0,2,4,6"),
    ((2, 1, 4, 2), "0,2", 4, SPREAD, "1,3-4,6"),
    ((2, 1, 4, 2), "0-3", 4, SPREAD, "8,10,12,14"),
    ((2, 1, 4, 2), "0,2", 6, SPREAD, "1,3-7"),
]


@pytest.mark.parametrize("shape,taken,need,policy,want", REFERENCE)
def test_koordinator_reference_cases(shape, taken, need, policy, want):
    topo = Topology.generate(*shape)
    assert format_cpuset(take_cpus(topo, free(topo, taken), need, policy, MOST)) == want


# 2 sockets x 2 NUMA nodes x 8 cores x 2 threads (64 CPUs); "taken" covers CPUs bound to other
# pods and those the kubelet's static CPU manager pinned alike: both leave the free set.
BIG = (2, 2, 8, 2)
BIG_CASES = [
    # (taken, need, policy, strategy, want, why)
    ("", 4, FULL, MOST, "0-3", "empty node: NUMA node 0, two whole cores"),
    ("", 4, FULL, LEAST, "0-3", "all NUMA nodes tie: the lowest id"),
    ("0-11", 4, FULL, MOST, "12-15", "bin-packing: the fullest NUMA node that still holds 2 whole cores"),
    ("0-11", 4, FULL, LEAST, "32-35", "spreading: an empty NUMA node on the emptier socket"),
    ("0-15", 16, FULL, MOST, "16-31", "pinned NUMA node 0: a whole NUMA node, the fuller socket"),
    ("0-15", 16, FULL, LEAST, "32-47", "pinned NUMA node 0: a whole NUMA node, the emptier socket"),
    ("", 20, FULL, MOST, "0-19", "more than a NUMA node: one socket, two NUMA nodes"),
    ("0,2,4,6,8,10,12,14", 4, FULL, MOST, "16-19", "NUMA node 0 has no whole core left"),
    ("", 4, SPREAD, MOST, "0,2,4,6", "one thread of each of 4 cores"),
    ("", 4, SPREAD, LEAST, "0,2,4,6", "ties: NUMA node 0"),
    ("0-11", 4, SPREAD, MOST, "16,18,20,22", "NUMA node 0 has 2 cores free: the next fullest socket's node"),
    ("0-11", 4, SPREAD, LEAST, "32,34,36,38", "the emptiest socket"),
    ("0-15", 8, SPREAD, MOST, "16,18,20,22,24,26,28,30", "pinned NUMA node 0: one thread of each core of node 1"),
]


@pytest.mark.parametrize("taken,need,policy,strategy,want,why", BIG_CASES)
def test_two_sockets_two_numa_nodes_each(taken, need, policy, strategy, want, why):
    topo = Topology.generate(*BIG)
    got = allocate(topo, free(topo, taken), need, policy, False, strategy)
    assert got.ok and format_cpuset(got.cpus) == want, why


SMALL = (1, 1, 4, 2)  # 1 socket x 4 cores x 2 threads
SMALL_CASES = [
    # (taken, need, policy, required, strategy, want or reason)
    ("", 2, FULL, False, MOST, "0-1"),
    ("", 2, FULL, False, LEAST, "0-1"),
    ("0-1", 4, FULL, False, MOST, "2-5"),  # kubelet-pinned core 0
    ("1,3", 4, FULL, True, MOST, "4-7"),  # cores 0 and 1 fragmented: the two whole ones
    ("1,3", 6, FULL, True, MOST, "node(s) insufficient CPUs to satisfy required cpu bind policy FullPCPUs"),
    ("1,3", 6, FULL, False, MOST, "0,2,4-7"),  # preferred: whatever is left
    ("", 3, FULL, True, MOST, REASON_SMT),
    ("", 4, SPREAD, False, MOST, "0,2,4,6"),
    ("0", 4, SPREAD, False, MOST, "1-2,4,6"),
    ("", 5, SPREAD, True, MOST, "node(s) insufficient CPUs to satisfy required cpu bind policy SpreadByPCPUs"),
    ("", 5, SPREAD, False, MOST, "0-2,4,6"),
    ("0-5", 4, FULL, False, MOST, REASON_NOT_ENOUGH),
]


@pytest.mark.parametrize("taken,need,policy,required,strategy,want", SMALL_CASES)
def test_one_socket_four_cores(taken, need, policy, required, strategy, want):
    topo = Topology.generate(*SMALL)
    got = allocate(topo, free(topo, taken), need, policy, required, strategy)
    assert (format_cpuset(got.cpus) if got.ok else got.reason) == want


def test_the_allocation_follows_the_siblings_not_the_numbering():
    """Linux numbers a 4-core, 8-thread CPU with siblings i and i + 4: a whole core is {0, 4}."""
    topo = Topology.linux_style(4)
    assert format_cpuset(allocate(topo, topo.ids(), 2, FULL, True, MOST).cpus) == "0,4"
    assert format_cpuset(allocate(topo, topo.ids(), 4, SPREAD, True, MOST).cpus) == "0-3"
    assert format_cpuset(allocate(topo, topo.ids() - {0}, 4, FULL, True, MOST).cpus) == "1-2,5-6"


NUMA_CASES = [
    # (taken, need, numa policy, strategy, want or reason)
    # six CPUs free on each NUMA node (24 in all): SingleNUMANode cannot place 8
    ("0-9,16-25,32-41,48-57", 8, "SingleNUMANode", MOST, REASON_NUMA),
    ("0-9,16-25,32-41,48-57", 8, "", MOST, "10-15,26-27"),
    ("0-9,16-25,32-41,48-57", 6, "SingleNUMANode", MOST, "10-15"),
    # NUMA node 0 half taken: 12 fit in one NUMA node only on nodes 1-3
    ("0-7", 12, "SingleNUMANode", MOST, "16-27"),
    ("0-7", 12, "SingleNUMANode", LEAST, "32-43"),
    # Restricted: 20 CPUs need two NUMA nodes at the least, and get two
    ("0-7,24-31", 20, "Restricted", MOST, "32-51"),
    # 28 CPUs free, but no two NUMA nodes hold 20 of them (6 + 8 + 6 + 8)
    ("0-9,24-41,56-63", 20, "Restricted", MOST, REASON_NUMA),
    ("0-9,24-41,56-63", 20, "", MOST, "10-23,42-47"),
]


@pytest.mark.parametrize("taken,need,numa,strategy,want", NUMA_CASES)
def test_numa_topology_policy(taken, need, numa, strategy, want):
    topo = Topology.generate(*BIG)
    got = allocate(topo, free(topo, taken), need, FULL, False, strategy, numa)
    assert (format_cpuset(got.cpus) if got.ok else got.reason) == want


def test_exclusive_policies_keep_away_from_held_cores_and_numa_nodes():
    topo = Topology.generate(*SMALL)
    # PCPULevel: core 0 holds a pod of the same policy on CPU 0: CPU 1 is avoided while others are free
    assert format_cpuset(take_cpus(topo, topo.ids() - {0}, 3, SPREAD, MOST, "PCPULevel", held_cores={0})) == "2,4,6"
    big = Topology.generate(*BIG)
    # NUMANodeLevel: NUMA node 0 is held by another such pod: node 1 although node 0 is as free
    assert format_cpuset(take_cpus(big, big.ids() - {0, 1}, 4, FULL, MOST, "NUMANodeLevel", held_nodes={0})) == "16-19"
    assert format_cpuset(take_cpus(big, big.ids() - {0, 1}, 4, FULL, MOST)) == "2-5"


def test_the_same_inputs_give_the_same_cpus_whatever_their_order():
    topo = Topology.generate(*BIG)
    avail = free(topo, "0-11,40-47")
    once = take_cpus(topo, sorted(avail), 10, FULL, LEAST)
    again = take_cpus(Topology(tuple(reversed(topo.cpus))), sorted(avail, reverse=True), 10, FULL, LEAST)
    assert once == again
