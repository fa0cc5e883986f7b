#!/usr/bin/env python3
"""Sets a share group's configuration (KIP-932) for scripts/demo --share and scripts/bench --share.

  share_group.py set-config --bootstrap B --group G NAME=VALUE [NAME=VALUE ...]

IncrementalAlterConfigs on the GROUP resource G (confluent-kafka's AdminClient), then
DescribeConfigs until every value reads back (bounded, 30 s): the controller commits the change
to the metadata log and the broker applies it a moment later, and a share group's first fetch
reads share.auto.offset.reset once, when the share-partition starts. Prints one line,
``group G NAME=VALUE ...``, and exits 0; 1 when the broker refused or the values did not appear.
scripts/SharePeer.java --set-group-config does the same through Apache Kafka's Admin client; this
one starts in half a second instead of a JVM's few.
"""

import argparse
import sys
import time


def cmd_set_config(opts):
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    want = {}
    for item in opts.settings:
        name, eq, value = item.partition("=")
        if not eq or not name:
            sys.exit("share_group.py: %r is not NAME=VALUE" % item)
        want[name] = value
    # log_level 3: errors only (no info line about its background queue on exit).
    admin = AdminClient(
        {"bootstrap.servers": opts.bootstrap, "client.id": "share-group-config", "log_level": 3}
    )
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in want.items()
    ]
    resource = ConfigResource(ResourceType.GROUP, opts.group, incremental_configs=entries)
    try:
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(timeout=opts.timeout_s)
    except Exception as e:  # noqa: BLE001 (the broker's refusal, printed as it came)
        sys.exit("share_group.py: group %s: IncrementalAlterConfigs failed: %s" % (opts.group, e))
    deadline = time.monotonic() + opts.timeout_s
    pending = want
    while True:
        try:
            futures = admin.describe_configs([ConfigResource(ResourceType.GROUP, opts.group)])
            config = next(iter(futures.values())).result(timeout=opts.timeout_s)
            pending = {
                k: (config[k].value if k in config else None)
                for k, v in want.items()
                if k not in config or config[k].value != v
            }
        except Exception as e:  # noqa: BLE001 (retried until the deadline)
            pending = {"describe": str(e)}
        if not pending:
            break
        if time.monotonic() > deadline:
            sys.exit(
                "share_group.py: group %s: not in force within %.0f s: %s"
                % (opts.group, opts.timeout_s, pending)
            )
        time.sleep(0.1)
    print("group %s %s" % (opts.group, " ".join("%s=%s" % kv for kv in want.items())))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("set-config", help="set a share group's configuration and wait for it")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--timeout-s", type=float, default=30.0)
    p.add_argument("settings", nargs="+", metavar="NAME=VALUE")
    p.set_defaults(func=cmd_set_config)
    opts = parser.parse_args()
    opts.func(opts)


if __name__ == "__main__":
    main()
