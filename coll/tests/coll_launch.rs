//! One launcher per node, torchrun's way (`--np N --nnodes M --node-rank K --master HOST:PORT`):
//! which ranks each node's launcher starts and what it gives them, the refusals of a node rank
//! or world out of range, and which master address can work from which node.

use vl_coll::env::MAX_WORLD;
use vl_coll::launch::{check_master, NodeRanks};

/// The flags of every child of `node`, in local-rank order, as `--flag value` strings.
fn children(node: &NodeRanks) -> Vec<String> {
    (0..node.np).map(|i| node.rank_flags(i).join(" ")).collect()
}

#[test]
fn two_launchers_on_this_host_make_ranks_0_to_3_with_local_ranks_0_and_1() {
    // vl_all_reduce_perf --np 2 --nnodes 2 --node-rank 0|1 --master 127.0.0.1:PORT
    let node0 = NodeRanks::new(2, 2, 0).unwrap();
    let node1 = NodeRanks::new(2, 2, 1).unwrap();
    assert_eq!(
        children(&node0),
        [
            "--rank 0 --world-size 4 --local-rank 0",
            "--rank 1 --world-size 4 --local-rank 1"
        ]
    );
    assert_eq!(
        children(&node1),
        [
            "--rank 2 --world-size 4 --local-rank 0",
            "--rank 3 --world-size 4 --local-rank 1"
        ]
    );
    // Both may meet at a loopback master: every "node" is this host.
    for node in [node0, node1] {
        check_master(&node, ("127.0.0.1", 29500), "--master 127.0.0.1:29500").unwrap();
    }
    // --np alone is the whole job here: rank = local rank.
    let here = NodeRanks::this_machine(3);
    assert_eq!(here, NodeRanks::new(3, 1, 0).unwrap());
    assert_eq!(children(&here)[2], "--rank 2 --world-size 3 --local-rank 2");
}

#[test]
fn the_launchers_of_all_nodes_make_every_rank_once() {
    for (np, nnodes) in [(1, 1), (3, 4), (2, 8), (1, MAX_WORLD), (MAX_WORLD / 4, 4)] {
        let mut ranks: Vec<u32> = (0..nnodes)
            .flat_map(|k| {
                let node = NodeRanks::new(np, nnodes, k).unwrap();
                assert_eq!(node.world_size(), np * nnodes);
                (0..np).map(move |i| node.rank(i))
            })
            .collect();
        ranks.sort_unstable();
        assert_eq!(
            ranks,
            (0..np * nnodes).collect::<Vec<_>>(),
            "{np} x {nnodes}"
        );
    }
}

#[test]
fn a_node_rank_or_world_out_of_range_is_refused_saying_what_to_give() {
    let e = |np, nnodes, k| NodeRanks::new(np, nnodes, k).unwrap_err();
    assert_eq!(
        e(2, 4, 4),
        "--node-rank 4: give 0..3, this node's number among the --nnodes 4 (each node's \
         launcher its own, node 0 on the host of --master)"
    );
    assert_eq!(
        e(2, 0, 0),
        "--nnodes 0: give 1..1024 nodes (each runs one launcher with --np ranks)"
    );
    assert!(e(1, MAX_WORLD + 1, 0).starts_with("--nnodes 1025: give 1..1024 nodes"));
    assert_eq!(
        e(600, 2, 0),
        "--np 600: give 1..512 ranks per node: the world, --nnodes 2 × --np, is at most 1024 \
         ranks"
    );
    assert_eq!(e(0, 2, 1), e(0, 2, 0));
    assert_eq!(e(0, 1, 0), "--np 0: give 1..1024 ranks");
    assert_eq!(e(1025, 1, 0), "--np 1025: give 1..1024 ranks");
    // No overflow on the way: 2^31 × 2 ranks.
    assert!(e(1 << 31, 2, 0).starts_with("--np 2147483648: give 1..512"));
}

#[test]
fn node_0_must_be_the_host_of_the_master_and_every_node_must_resolve_it() {
    let node = |k| NodeRanks::new(2, 2, k).unwrap();
    // 192.0.2.1 (TEST-NET-1) is no address of this host: node 0 could not be rank 0 there.
    let e = check_master(&node(0), ("192.0.2.1", 29500), "--master 192.0.2.1:29500").unwrap_err();
    assert!(
        e.starts_with("--master 192.0.2.1:29500: 192.0.2.1 is not an address of this host (")
            && e.ends_with(
                "): node 0's launcher starts rank 0, which listens there for every other rank — \
             start --node-rank 0 on 192.0.2.1, or give as master an address of this host, the \
             same on every node"
            ),
        "{e}"
    );
    // Another node only connects there.
    check_master(&node(1), ("192.0.2.1", 29500), "--master 192.0.2.1:29500").unwrap();
    // The name the refusal gives is the one the user gave.
    let e = check_master(
        &node(0),
        ("192.0.2.1", 1),
        "MASTER_ADDR=192.0.2.1 MASTER_PORT=1",
    )
    .unwrap_err();
    assert!(
        e.starts_with("MASTER_ADDR=192.0.2.1 MASTER_PORT=1: "),
        "{e}"
    );
    // No host's address, and a name that does not resolve, work from no node.
    for k in [0, 1] {
        let e = check_master(&node(k), ("0.0.0.0", 5), "--master 0.0.0.0:5").unwrap_err();
        assert_eq!(
            e,
            "--master 0.0.0.0:5: 0.0.0.0 is no host's address; give node 0's address, the same \
             on every node"
        );
        let e = check_master(&node(k), ("no-such-host.invalid", 5), "--master x").unwrap_err();
        assert!(
            e.starts_with("--master x: cannot resolve no-such-host.invalid: ")
                && e.ends_with("; give node 0's address, or a host name every node resolves"),
            "{e}"
        );
    }
}
