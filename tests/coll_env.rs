//! Rank, world size and rendezvous address from flags and each launcher's environment.

use std::collections::HashMap;

use verbs_lab::coll::env::{parse_host_port, pick_device, resolve, Launcher, RankFlags};

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
    assert_eq!((i.rank, i.world_size, i.local_rank), (3, 8, 1));
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
        (2, 4, 0, Launcher::OpenMpi)
    );

    let e = env(&[("PMI_RANK", "1"), ("PMI_SIZE", "2"), MASTER[0], MASTER[1]]);
    let i = resolve(&none(), &e).unwrap();
    // MPICH gives no local rank: the rank stands in for it.
    assert_eq!(
        (i.rank, i.world_size, i.local_rank, i.launcher),
        (1, 2, 1, Launcher::Mpich)
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
        (5, 6, 1, Launcher::Slurm)
    );
}

#[test]
fn first_match_wins() {
    // torchrun under srun under mpirun: flags > torchrun > Open MPI > MPICH > Slurm.
    let all = [
        ("RANK", "1"),
        ("WORLD_SIZE", "2"),
        ("OMPI_COMM_WORLD_RANK", "3"),
        ("OMPI_COMM_WORLD_SIZE", "4"),
        ("PMI_RANK", "5"),
        ("PMI_SIZE", "6"),
        ("SLURM_PROCID", "6"),
        ("SLURM_NTASKS", "8"),
        MASTER[0],
        MASTER[1],
    ];
    let i = resolve(&none(), &env(&all)).unwrap();
    assert_eq!(
        (i.rank, i.world_size, i.launcher),
        (1, 2, Launcher::Torchrun)
    );
    let i = resolve(&none(), &env(&all[2..])).unwrap();
    assert_eq!(
        (i.rank, i.world_size, i.launcher),
        (3, 4, Launcher::OpenMpi)
    );
    let i = resolve(&none(), &env(&all[4..])).unwrap();
    assert_eq!((i.rank, i.world_size, i.launcher), (5, 6, Launcher::Mpich));
    let i = resolve(&none(), &env(&all[6..])).unwrap();
    assert_eq!((i.rank, i.world_size, i.launcher), (6, 8, Launcher::Slurm));
    let flags = RankFlags {
        rank: Some(0),
        world_size: Some(3),
        master: Some("h:1".into()),
        ..Default::default()
    };
    let i = resolve(&flags, &env(&all)).unwrap();
    assert_eq!((i.rank, i.world_size, i.launcher), (0, 3, Launcher::Flags));
    // --master beats MASTER_ADDR/MASTER_PORT.
    assert_eq!(i.master, Some(("h".into(), 1)));
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
