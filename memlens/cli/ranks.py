"""`python main.py ranks DIR`: a torchrun job's ranks side by side, one row a rank, and
the job's imbalance (memlens.core.runfolder.ranks, which the app's ranks tab shows too)."""

from __future__ import annotations

from memlens.cli.args import EXIT_OK, command_parser, refuse


def add_parser(subparsers) -> None:
    p = command_parser(
        subparsers, "ranks",
        "Show each rank of a watched torchrun job (DIR/rank0, DIR/rank1, ...): host, node, "
        "steps, peak bytes, mean and p95 step time, memory by category at the peak (and "
        "for FSDP each rank's shard, its padding and the all-gather peak); then the "
        "imbalance: the largest peak over the smallest, the slowest rank's mean step time "
        "over the median; and what sharding does (FSDP's all-gather peak, uneven shards, "
        "DDP's buckets). See docs/watch.md.",
    )
    p.add_argument("job_dir", metavar="DIR", help="the folder the job's ranks recorded into")


def main(args) -> int:
    from memlens.core.excerpt import printable
    from memlens.core.runfolder.format import RunFolderError
    from memlens.core.runfolder.ranks import (
        imbalance_text,
        read_job,
        sharding_text,
        table_header,
        table_rows,
    )

    try:
        job = read_job(args.job_dir)
    except RunFolderError as exc:
        return refuse("ranks", exc)
    # host and folder names come from the ranks' files: shown, never acted on by a terminal
    header = table_header(job)
    rows = [[printable(cell) for cell in row] for row in table_rows(job)]
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(header)]
    left = {0, 1, len(header) - 1}  # rank, host and note read left to right; figures align right
    for line in (header, *rows):
        print("  ".join(c.ljust(w) if i in left else c.rjust(w)
                        for i, (c, w) in enumerate(zip(line, widths, strict=True))).rstrip())
    print(printable(imbalance_text(job)))
    sharding = sharding_text(job)
    if sharding:
        for line in sharding.splitlines():  # each line printable, the lines kept
            print(printable(line))
    return EXIT_OK
