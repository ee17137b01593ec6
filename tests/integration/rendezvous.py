"""A job program for the launcher's tests: every rank meets rank 0 at MASTER_ADDR:MASTER_PORT over TCP
and says who it is; rank 0 checks that all WORLD_SIZE ranks came, each from the address its
STARNET_IP names, and that every rank's GLOO_SOCKET_IFNAME is an interface of its host. Exit 0 when
all holds; `--fail-rank R` makes rank R exit 7 at once (and the others wait for ever)."""

from __future__ import annotations

import json
import os
import socket
import sys
import time


def main() -> int:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if "--fail-rank" in sys.argv and rank == int(sys.argv[sys.argv.index("--fail-rank") + 1]):
        print(f"rank {rank}: failing on purpose", flush=True)
        return 7
    ifname = os.environ["GLOO_SOCKET_IFNAME"]
    if not os.path.exists(f"/sys/class/net/{ifname}"):
        print(f"rank {rank}: no interface {ifname}", flush=True)
        return 3
    master = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
    if rank == 0:
        server = socket.create_server(master)
        seen = {0: os.environ["STARNET_IP"]}
        while len(seen) < world:
            conn, (ip, _) = server.accept()
            hello = json.loads(conn.makefile().readline())
            if hello["ip"] != ip:
                print(f"rank {hello['rank']} says {hello['ip']} but came from {ip}", flush=True)
                return 4
            seen[hello["rank"]] = ip
            conn.close()
        print(f"rank 0: met {world} ranks: {json.dumps(seen, sort_keys=True)}", flush=True)
        return 0
    deadline = time.monotonic() + 30
    while True:
        try:
            conn = socket.create_connection(master, timeout=2)
            break
        except OSError:
            if time.monotonic() > deadline:
                print(f"rank {rank}: no rank 0 at {master}", flush=True)
                return 5
            time.sleep(0.1)
    conn.sendall((json.dumps({"rank": rank, "ip": os.environ["STARNET_IP"]}) + "\n").encode())
    print(f"rank {rank}: met rank 0 at {master[0]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
