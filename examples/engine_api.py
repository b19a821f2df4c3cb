"""The engine API in one script: a database written with ``Db``, read with ``DbReader``, and a
sharded ``Table`` created, written shard by shard, and opened again with ``Table.open``.

Run it with the project's interpreter (no need to activate the venv)::

    .venv/bin/python examples/engine_api.py            # a temporary directory, deleted after
    .venv/bin/python examples/engine_api.py --dir /tmp/lake   # keep the store to look at it

Everything here is the public API: the names ``slatedb_core`` re-exports.
"""

from __future__ import annotations

import argparse
import tempfile
from datetime import timedelta
from pathlib import Path

import slatedb_core as sc


def database_example(store: sc.ObjectStore) -> None:
    """A single database: one writer (``Db``) and any number of readers (``DbReader``)."""
    # Db.open creates the database if it does not exist, and fences any older writer.
    with sc.Db.open("orders", store, options=sc.DbOptions()) as db:
        db.put(b"order-0001", b'{"amount": 10}')  # returns once durable (in a WAL SST)
        db.put(b"order-0002", b'{"amount": 20}')
        db.write(sc.WriteBatch().put(b"order-0003", b'{"amount": 30}').delete(b"order-0001"))
        print("Db: get order-0002 ->", db.get(b"order-0002"))
        print("Db: get order-0001 ->", db.get(b"order-0001"), "(deleted in the batch)")
        for key, value in db.scan(b"order-0000", b"order-9999"):  # the end is exclusive
            print("Db: scan", key.decode(), value.decode())
        # a checkpoint pins this state: a reader opened on it sees exactly these keys
        checkpoint = db.create_checkpoint(
            options=sc.CheckpointOptions(lifetime=timedelta(minutes=10))
        )
        db.put(b"order-0004", b'{"amount": 40}')  # after the checkpoint
    # leaving the `with` block closed the writer (db.close())

    # A reader on the latest state (a managed checkpoint it refreshes by itself) ...
    with sc.DbReader.open("orders", store) as reader:
        keys = [key.decode() for key, _ in reader.scan(None, None)]
        print("DbReader (latest):", keys)
    # ... and one on the checkpoint taken above: order-0004 is not in it.
    with sc.DbReader.open("orders", store, checkpoint=checkpoint.id) as reader:
        keys = [key.decode() for key, _ in reader.scan(None, None)]
        print(f"DbReader (checkpoint {checkpoint.id}):", keys)


def table_example(store: sc.ObjectStore) -> None:
    """A sharded table: key ranges mapped to databases, one writer per shard."""
    # Two split points -> three shards: [-inf, "g"), ["g", "p"), ["p", +inf).
    table = sc.Table.create("events", store, split_points=[b"g", b"p"])
    for key in [b"apple", b"kiwi", b"mango", b"zucchini"]:
        shard = table.shard_for(key)
        with table.writer(shard) as writer:  # a shard's writer is a Db
            writer.put(key, b"fruit" if key != b"zucchini" else b"vegetable")
    table.close()

    # Any process can open the table by its path and read across its shards.
    table = sc.Table.open("events", store)
    for shard in table.shards:
        rng = shard.key_range  # start inclusive, end exclusive; None is unbounded
        print(f"Table: shard {shard.index} [{rng.start!r}, {rng.end!r}) -> {shard.db_path}")
    print("Table: get kiwi ->", table.get(b"kiwi"))
    print("Table: scan [a, n) ->", [key.decode() for key, _ in table.scan(b"a", b"n")])
    print("Table: count ->", table.count())
    table.split(1, at=b"l")  # split shard 1 (["g", "p")) at "l": four shards now
    print("Table: after split, shards =", len(table.shards), "count =", table.count())
    table.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", help="store directory (default: a temporary one, deleted after)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="slatedb-example-") as tmp:
        root = Path(args.dir or tmp).resolve()
        root.mkdir(parents=True, exist_ok=True)
        store = sc.open_store(root.as_uri())  # file:///...; "s3://bucket/prefix" works the same
        print("store:", store.url)
        database_example(store)
        table_example(store)
    print("engine_api: done")


if __name__ == "__main__":
    main()
