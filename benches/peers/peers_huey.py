"""The huey side of scripts/bench_peers.sh: a SqliteHuey instance and its cheapest real task.

The consumer imports this module (`huey_consumer peers_huey.huey`); the producer calls `ping(n)`.
The database is the one named by PEERS_HUEY_DB. `fsync=True` is huey's switch for
`PRAGMA synchronous = FULL` (WAL is huey's default journal mode), the durability every row of
the benchmark table shares. `timeout=60` (huey's default busy timeout is 5 s): with FULL commits
from the producer and the consumer's exclusive transactions, 5 s is not enough on a loaded
machine and the producer dies with "database is locked".
"""

import os

from huey import SqliteHuey

huey = SqliteHuey(
    "peers",
    filename=os.environ.get("PEERS_HUEY_DB", "peers-huey.db"),
    fsync=True,
    journal_mode="wal",
    timeout=60,
)


@huey.task()
def ping(n):
    """Returns its argument: the result huey stores in its `kv` table."""
    return n
