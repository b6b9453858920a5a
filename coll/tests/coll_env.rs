//! Rank, world size and rendezvous address from flags and each launcher's environment.

use std::collections::HashMap;

use vl_coll::env::{parse_host_port, pick_device, resolve, Launcher, RankFlags};

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let m: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| m.get(k).cloned()
}

fn none() -> RankFlags {
    RankFlags::default()
}

const MASTER: [(&str, &str); 2] = [("MASTER_ADDR", "10.0.0.1"), ("MASTER_PORT", "29500")];

#[test]
fn torchrun() {
    let e = env(&[
        ("RANK", "3"),
        ("WORLD_SIZE", "8"),
        ("LOCAL_RANK", "1"),
        MASTER[0],
        MASTER[1],
    ]);
    let i = resolve(&none(), &e).unwrap();
    assert_eq!((i.rank, i.world_size, i.local_rank), (3, 8, Some(1)));
    assert_eq!(i.launcher, Launcher::Torchrun);
    assert_eq!(i.master, Some(("10.0.0.1".into(), 29500)));
}

#[test]
fn open_mpi_mpich_and_slurm() {
    let e = env(&[
        ("OMPI_COMM_WORLD_RANK", "2"),
        ("OMPI_COMM_WORLD_SIZE", "4"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
        MASTER[0],
        MASTER[1],
    ]);
    let i = resolve(&none(), &e).unwrap();
    assert_eq!(
        (i.rank, i.world_size, i.local_rank, i.launcher),
        (2, 4, Some(0), Launcher::OpenMpi)
    );

    let e = env(&[("PMI_RANK", "1"), ("PMI_SIZE", "2"), MASTER[0], MASTER[1]]);
    let i = resolve(&none(), &e).unwrap();
    // MPICH gives no local rank: the rendezvous counts it from the host names.
    assert_eq!(
        (i.rank, i.world_size, i.local_rank, i.launcher),
        (1, 2, None, Launcher::Mpich)
    );

    let e = env(&[
        ("SLURM_PROCID", "5"),
        ("SLURM_NTASKS", "6"),
        ("SLURM_LOCALID", "1"),
        MASTER[0],
        MASTER[1],
    ]);
    let i = resolve(&none(), &e).unwrap();
    assert_eq!(
        (i.rank, i.world_size, i.local_rank, i.launcher),
        (5, 6, Some(1), Launcher::Slurm)
    );
}

#[test]
fn agreeing_launchers_take_the_first_and_flags_override_them_all() {
    // srun --mpi=pmi2 under MPICH, with a wrapper that also exports RANK: all agree.
    let all = [
        ("RANK", "1"),
        ("WORLD_SIZE", "4"),
        ("LOCAL_RANK", "1"),
        ("OMPI_COMM_WORLD_RANK", "1"),
        ("OMPI_COMM_WORLD_SIZE", "4"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ("PMI_RANK", "1"),
        ("PMI_SIZE", "4"),
        ("SLURM_PROCID", "1"),
        ("SLURM_NTASKS", "4"),
        ("SLURM_LOCALID", "1"),
        MASTER[0],
        MASTER[1],
    ];
    for (from, launcher) in [
        (0, Launcher::Torchrun),
        (3, Launcher::OpenMpi),
        (6, Launcher::Mpich),
        (8, Launcher::Slurm),
    ] {
        let i = resolve(&none(), &env(&all[from..])).unwrap();
        assert_eq!(
            (i.rank, i.world_size, i.local_rank, i.launcher),
            (1, 4, (launcher != Launcher::Mpich).then_some(1), launcher)
        );
    }
    // Flags are the deliberate override (and what --np gives its ranks): the environment is
    // neither read nor compared, whatever it says.
    let stale = [
        ("RANK", "0"),
        ("WORLD_SIZE", "1"),
        ("SLURM_PROCID", "3"),
        ("SLURM_NTASKS", "4"),
    ];
    let flags = RankFlags {
        rank: Some(2),
        world_size: Some(3),
        master: Some("h:1".into()),
        ..Default::default()
    };
    let i = resolve(&flags, &env(&stale)).unwrap();
    assert_eq!((i.rank, i.world_size, i.launcher), (2, 3, Launcher::Flags));
    // --master beats MASTER_ADDR/MASTER_PORT.
    assert_eq!(i.master, Some(("h".into(), 1)));
}

/// F7: a `RANK=0 WORLD_SIZE=1` left exported under `mpirun -np 2` made each rank a world of
/// its own that passed without a byte on the network.
#[test]
fn launchers_that_disagree_are_refused_naming_both() {
    let e = resolve(
        &none(),
        &env(&[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
        ]),
    )
    .unwrap_err();
    assert_eq!(
        e,
        "two launchers disagree about this process: RANK=0 WORLD_SIZE=1 (torchrun \
         (RANK/WORLD_SIZE)) but OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 (Open MPI \
         (OMPI_COMM_WORLD_*)); one of them is stale, left exported from another run: unset its \
         variables (`unset RANK WORLD_SIZE LOCAL_RANK` or `unset OMPI_COMM_WORLD_RANK \
         OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_RANK`), or give --rank and --world-size \
         (with --master), which override the environment"
    );
    // The same world size, another rank.
    let e = resolve(
        &none(),
        &env(&[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            MASTER[0],
            MASTER[1],
        ]),
    )
    .unwrap_err();
    assert!(e.contains("RANK=0 WORLD_SIZE=2 (torchrun"), "{e}");
    // Only the local rank differs: it is named.
    let e = resolve(
        &none(),
        &env(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "0"),
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_LOCALID", "1"),
            MASTER[0],
            MASTER[1],
        ]),
    )
    .unwrap_err();
    assert!(
        e.contains("LOCAL_RANK=0 (torchrun") && e.contains("SLURM_LOCALID=1 (Slurm"),
        "{e}"
    );
    // A stale RANK under srun, two MPIs at once, and an MPI world of one as Slurm task 3 of
    // 4 (srun started four single-rank jobs).
    for pairs in [
        [
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "4"),
        ],
        [
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "1"),
            ("PMI_RANK", "3"),
            ("PMI_SIZE", "4"),
        ],
        [
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "4"),
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "1"),
        ],
    ] {
        let e = resolve(&none(), &env(&pairs)).unwrap_err();
        assert!(e.starts_with("two launchers disagree"), "{pairs:?}: {e}");
    }
    // A compared source must be complete too.
    let e = resolve(
        &none(),
        &env(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
            ("OMPI_COMM_WORLD_RANK", "0"),
        ]),
    )
    .unwrap_err();
    assert!(e.contains("OMPI_COMM_WORLD_SIZE is not"), "{e}");
}

/// Nestings that set other values on purpose keep working, the innermost launcher winning.
#[test]
fn nested_launchers_are_not_compared() {
    let cases: [(&str, &[(&str, &str)], _); 3] = [
        (
            "srun -N 2 torchrun --nproc-per-node 4: the worker's SLURM_* are its agent's",
            &[
                ("RANK", "5"),
                ("WORLD_SIZE", "8"),
                ("LOCAL_RANK", "1"),
                ("TORCHELASTIC_RUN_ID", "job1"),
                ("SLURM_PROCID", "1"),
                ("SLURM_NTASKS", "2"),
                ("SLURM_LOCALID", "0"),
                MASTER[0],
                MASTER[1],
            ],
            (5, 8, Some(1), Launcher::Torchrun),
        ),
        (
            "mpirun -np 4 inside an sbatch allocation: SLURM_* are the batch step's",
            &[
                ("OMPI_COMM_WORLD_RANK", "2"),
                ("OMPI_COMM_WORLD_SIZE", "4"),
                ("OMPI_COMM_WORLD_LOCAL_RANK", "2"),
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "4"),
                ("SLURM_LOCALID", "0"),
                MASTER[0],
                MASTER[1],
            ],
            (2, 4, Some(2), Launcher::OpenMpi),
        ),
        (
            "mpirun -np 1 there for a quick test: the batch step is task 0",
            &[
                ("OMPI_COMM_WORLD_RANK", "0"),
                ("OMPI_COMM_WORLD_SIZE", "1"),
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "4"),
            ],
            (0, 1, None, Launcher::OpenMpi),
        ),
    ];
    for (what, pairs, want) in cases {
        let i = resolve(&none(), &env(pairs)).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(
            (i.rank, i.world_size, i.local_rank, i.launcher),
            want,
            "{what}"
        );
    }
}

#[test]
fn an_incomplete_launcher_environment_is_named() {
    let e = resolve(&none(), &env(&[("RANK", "1")])).unwrap_err();
    assert!(e.contains("WORLD_SIZE") && e.contains("torchrun"), "{e}");
    let e = resolve(&none(), &env(&[("OMPI_COMM_WORLD_SIZE", "4")])).unwrap_err();
    assert!(e.contains("OMPI_COMM_WORLD_RANK"), "{e}");
    let flags = RankFlags {
        rank: Some(1),
        ..Default::default()
    };
    assert!(resolve(&flags, &env(&[]))
        .unwrap_err()
        .contains("--world-size"));
}

#[test]
fn bad_values_get_clear_errors() {
    let e = resolve(&none(), &env(&[("RANK", "one"), ("WORLD_SIZE", "2")])).unwrap_err();
    assert!(
        e.contains("RANK=\"one\" is not a non-negative integer"),
        "{e}"
    );
    let huge = "99999999999999999999";
    let e = resolve(&none(), &env(&[("RANK", "0"), ("WORLD_SIZE", huge)])).unwrap_err();
    assert_eq!(
        e,
        format!("WORLD_SIZE=\"{huge}\" is too large: ranks and world sizes go up to 1024")
    );
    let e = resolve(
        &none(),
        &env(&[("RANK", "4"), ("WORLD_SIZE", "4"), MASTER[0], MASTER[1]]),
    )
    .unwrap_err();
    assert!(e.contains("rank 4 is not below the world size 4"), "{e}");
    let e = resolve(&none(), &env(&[("RANK", "0"), ("WORLD_SIZE", "0")])).unwrap_err();
    assert!(e.contains("world size 0"), "{e}");
    let e = resolve(&none(), &env(&[("RANK", "0"), ("WORLD_SIZE", "2")])).unwrap_err();
    assert!(
        e.contains("--master HOST:PORT") && e.contains("MASTER_ADDR"),
        "{e}"
    );
    let e = resolve(
        &none(),
        &env(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "x"),
        ]),
    )
    .unwrap_err();
    assert!(e.contains("MASTER_PORT=\"x\""), "{e}");
    let e = resolve(
        &none(),
        &env(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "h")]),
    )
    .unwrap_err();
    assert!(e.contains("MASTER_PORT is not"), "{e}");
    let e = resolve(
        &none(),
        &env(&[("LOCAL_RANK", "z"), ("RANK", "0"), ("WORLD_SIZE", "1")]),
    )
    .unwrap_err();
    assert!(e.contains("LOCAL_RANK"), "{e}");
}

#[test]
fn a_single_rank_needs_nothing() {
    let i = resolve(&none(), &env(&[])).unwrap();
    assert_eq!(
        (i.rank, i.world_size, i.launcher, i.master),
        (0, 1, Launcher::Single, None)
    );
    let i = resolve(&none(), &env(&[("RANK", "0"), ("WORLD_SIZE", "1")])).unwrap();
    assert_eq!((i.world_size, i.master), (1, None));
}

#[test]
fn master_addresses() {
    assert_eq!(
        parse_host_port("node1:29500").unwrap(),
        ("node1".into(), 29500)
    );
    assert_eq!(parse_host_port("[::1]:80").unwrap(), ("::1".into(), 80));
    assert!(parse_host_port("node1").unwrap_err().contains("HOST:PORT"));
    assert!(parse_host_port("node1:0").unwrap_err().contains("1..65535"));
    assert!(parse_host_port(":5").unwrap_err().contains("host is empty"));
}

#[test]
fn local_ranks_take_devices_round_robin() {
    let d: Vec<String> = vec!["rxe0".into(), "rxe1".into()];
    let picks: Vec<_> = (0..4).map(|l| pick_device(&d, l).unwrap()).collect();
    assert_eq!(picks, ["rxe0", "rxe1", "rxe0", "rxe1"]);
    assert_eq!(pick_device(&[], 3), None);
}

/// DeepSpeed's launcher (`deepspeed/launcher/launch.py`) sets torchrun's variables plus
/// `CROSS_RANK` (the node), `CROSS_SIZE` (the nodes) and `LOCAL_SIZE` (the ranks on the node),
/// numbering the ranks node by node with `LOCAL_RANK` = `RANK` mod `LOCAL_SIZE`; its MPICH and
/// Intel MPI runners add `LOCAL_SIZE` alone.
#[test]
fn deepspeed_is_named_and_its_variables_agree_with_torchruns() {
    let cases: [(&str, &[(&str, &str)], _); 4] = [
        (
            "launch.py, node 2 of 4 with 2 ranks each",
            &[
                ("RANK", "5"),
                ("WORLD_SIZE", "8"),
                ("LOCAL_RANK", "1"),
                ("CROSS_RANK", "2"),
                ("CROSS_SIZE", "4"),
                ("LOCAL_SIZE", "2"),
                MASTER[0],
                MASTER[1],
            ],
            (5, 8, Some(1)),
        ),
        (
            "a hostfile with 3 slots on node a and 2 on node b: b's ranks 3 and 4, local 1 and 0",
            &[
                ("RANK", "3"),
                ("WORLD_SIZE", "5"),
                ("LOCAL_RANK", "1"),
                ("CROSS_RANK", "1"),
                ("CROSS_SIZE", "2"),
                ("LOCAL_SIZE", "2"),
                MASTER[0],
                MASTER[1],
            ],
            (3, 5, Some(1)),
        ),
        (
            "srun -N 2 deepspeed --no_ssh --node_rank $SLURM_PROCID: SLURM_* are the agent's",
            &[
                ("RANK", "3"),
                ("WORLD_SIZE", "4"),
                ("LOCAL_RANK", "1"),
                ("CROSS_RANK", "1"),
                ("CROSS_SIZE", "2"),
                ("LOCAL_SIZE", "2"),
                ("SLURM_PROCID", "1"),
                ("SLURM_NTASKS", "2"),
                ("SLURM_LOCALID", "0"),
                MASTER[0],
                MASTER[1],
            ],
            (3, 4, Some(1)),
        ),
        (
            "the Intel MPI runner: LOCAL_SIZE alone, beside Hydra's PMI_RANK, which agrees",
            &[
                ("RANK", "2"),
                ("WORLD_SIZE", "4"),
                ("LOCAL_RANK", "0"),
                ("LOCAL_SIZE", "2"),
                ("PMI_RANK", "2"),
                ("PMI_SIZE", "4"),
                MASTER[0],
                MASTER[1],
            ],
            (2, 4, Some(0)),
        ),
    ];
    for (what, pairs, want) in cases {
        let i = resolve(&none(), &env(pairs)).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!((i.rank, i.world_size, i.local_rank), want, "{what}");
        assert_eq!(i.launcher, Launcher::DeepSpeed, "{what}");
    }
    assert_eq!(
        Launcher::DeepSpeed.to_string(),
        "DeepSpeed (RANK/WORLD_SIZE, CROSS_RANK/CROSS_SIZE/LOCAL_SIZE)"
    );
    // Without them it is torchrun, as before.
    let i = resolve(&none(), &env(&[("RANK", "0"), ("WORLD_SIZE", "1")])).unwrap();
    assert_eq!(i.launcher, Launcher::Torchrun);
    // Under its elastic agent (torch elastic) the node the rendezvous chose need not be
    // CROSS_RANK, nor the nodes that joined CROSS_SIZE: only the bounds hold.
    let elastic = [
        ("RANK", "1"),
        ("WORLD_SIZE", "2"),
        ("LOCAL_RANK", "0"),
        ("CROSS_RANK", "3"),
        ("CROSS_SIZE", "4"),
        ("LOCAL_SIZE", "1"),
        ("TORCHELASTIC_RUN_ID", "ds"),
        MASTER[0],
        MASTER[1],
    ];
    let i = resolve(&none(), &env(&elastic)).unwrap();
    assert_eq!((i.rank, i.launcher), (1, Launcher::DeepSpeed));
}

#[test]
fn deepspeed_variables_that_are_incomplete_or_disagree_are_refused_naming_them() {
    let base = [("RANK", "5"), ("WORLD_SIZE", "8"), MASTER[0], MASTER[1]];
    let with = |more: &[(&'static str, &'static str)]| {
        let all: Vec<(&str, &str)> = base.iter().chain(more).copied().collect();
        resolve(&none(), &env(&all)).unwrap_err()
    };
    let e = with(&[
        ("LOCAL_RANK", "0"),
        ("CROSS_RANK", "2"),
        ("CROSS_SIZE", "4"),
        ("LOCAL_SIZE", "2"),
    ]);
    assert_eq!(
        e,
        "DeepSpeed's variables disagree about this process: RANK=5 WORLD_SIZE=8 LOCAL_RANK=0 \
         LOCAL_SIZE=2 CROSS_RANK=2 CROSS_SIZE=4: DeepSpeed's launcher gives LOCAL_RANK = RANK \
         mod LOCAL_SIZE; some of them are stale, left exported from another run: unset them \
         (`unset RANK WORLD_SIZE LOCAL_RANK CROSS_RANK CROSS_SIZE LOCAL_SIZE`), or give --rank \
         and --world-size (with --master), which override the environment"
    );
    for (more, why) in [
        (
            &[
                ("LOCAL_RANK", "1"),
                ("CROSS_RANK", "2"),
                ("LOCAL_SIZE", "2"),
            ][..],
            "CROSS_RANK is set but CROSS_SIZE is not: the DeepSpeed (RANK/WORLD_SIZE, \
             CROSS_RANK/CROSS_SIZE/LOCAL_SIZE) environment is incomplete",
        ),
        (
            &[
                ("LOCAL_RANK", "1"),
                ("CROSS_RANK", "2"),
                ("CROSS_SIZE", "4"),
            ],
            "CROSS_RANK is set but LOCAL_SIZE is not",
        ),
        (
            &[("LOCAL_SIZE", "2")],
            "LOCAL_SIZE is set but LOCAL_RANK is not",
        ),
        (
            &[("LOCAL_RANK", "1"), ("LOCAL_SIZE", "two")],
            "LOCAL_SIZE=\"two\" is not a non-negative integer",
        ),
        (
            &[("LOCAL_RANK", "2"), ("LOCAL_SIZE", "2")],
            "LOCAL_RANK=2 LOCAL_SIZE=2: LOCAL_RANK must be below LOCAL_SIZE",
        ),
        (
            &[("LOCAL_RANK", "1"), ("LOCAL_SIZE", "9")],
            "LOCAL_SIZE, the ranks on this node, cannot exceed WORLD_SIZE",
        ),
        (
            &[
                ("LOCAL_RANK", "1"),
                ("CROSS_RANK", "4"),
                ("CROSS_SIZE", "4"),
                ("LOCAL_SIZE", "2"),
            ],
            "CROSS_RANK, this node's rank, must be below CROSS_SIZE",
        ),
        (
            // Rank 5 on node 0 of 4: nodes 1, 2 and 3 would hold ranks 6 and 7 only.
            &[
                ("LOCAL_RANK", "1"),
                ("CROSS_RANK", "0"),
                ("CROSS_SIZE", "4"),
                ("LOCAL_SIZE", "2"),
            ],
            "numbers the ranks node by node, at least one on each node",
        ),
        (
            // 6 ranks on this node and at least one on each of the 3 others: more than 8.
            &[
                ("LOCAL_RANK", "5"),
                ("CROSS_RANK", "1"),
                ("CROSS_SIZE", "4"),
                ("LOCAL_SIZE", "6"),
            ],
            "numbers the ranks node by node",
        ),
    ] {
        let e = with(more);
        assert!(e.contains(why), "{more:?}: {e}");
    }
    // Without DeepSpeed's per-node variables nothing explains a disagreeing srun: refused.
    let e = with(&[
        ("LOCAL_RANK", "1"),
        ("LOCAL_SIZE", "2"),
        ("SLURM_PROCID", "1"),
        ("SLURM_NTASKS", "2"),
    ]);
    assert!(e.starts_with("two launchers disagree"), "{e}");
}
