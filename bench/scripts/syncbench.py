#!/usr/bin/env python3
"""What an fdatasync after each append costs, into a growing file and into
a preallocated one (docs/benchmarks.md, "Preallocated log segments").

    bench/scripts/syncbench.py [DIR]

Appends SIZE-byte records (default 4,400: a 4 KiB object's log entry) to a
file in DIR (default $TMPDIR), each followed by an fdatasync, COUNT times
(default 3,000): once into a new file that grows with every append (its
size must be made durable by every sync), once into a file filled with
zeros and synced beforehand (the appends overwrite blocks that exist, so a
sync writes only the data), alternating ROUNDS times (default 2). Prints
per sync the wall time, the process CPU (user + system) and the voluntary
context switches (each a wait for the disk).
"""

import os
import resource
import sys
import tempfile
import time

COUNT = int(os.environ.get("COUNT", "3000"))
SIZE = int(os.environ.get("SIZE", "4400"))
ROUNDS = int(os.environ.get("ROUNDS", "2"))


def run(directory, preallocated, fallocate=False):
    path = os.path.join(directory, "syncbench.dat")
    if os.path.exists(path):
        os.remove(path)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        prep = resource.getrusage(resource.RUSAGE_SELF)
        if fallocate:
            os.posix_fallocate(fd, 0, COUNT * SIZE + (1 << 20))
            os.fdatasync(fd)
        elif preallocated:
            zeros = b"\0" * (1 << 20)
            for _ in range((COUNT * SIZE >> 20) + 1):
                os.write(fd, zeros)
            os.fdatasync(fd)
        record = os.urandom(SIZE)
        before = resource.getrusage(resource.RUSAGE_SELF)
        prep_cpu = (before.ru_utime - prep.ru_utime + before.ru_stime - prep.ru_stime)
        start = time.perf_counter()
        for i in range(COUNT):
            os.pwrite(fd, record, i * SIZE)
            os.fdatasync(fd)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        os.close(fd)
        os.remove(path)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    waits = after.ru_nvcsw - before.ru_nvcsw
    kind = "fallocated  " if fallocate else "preallocated" if preallocated else "growing     "
    print(f"{kind}: {COUNT / wall:6.0f} syncs/s, {1e6 * wall / COUNT:5.0f} us wall, "
          f"{1e6 * cpu / COUNT:5.1f} us CPU, {waits / COUNT:.2f} waits per sync; "
          f"preparing the file {1e6 * prep_cpu / COUNT:5.1f} us CPU per append")


def main():
    directory = sys.argv[1] if len(sys.argv) > 1 else tempfile.gettempdir()
    print(f"# syncbench: {time.strftime('%Y-%m-%d %H:%M:%S')}, {COUNT} appends of {SIZE} B "
          f"each followed by fdatasync, in {directory}")
    for _ in range(ROUNDS):
        run(directory, False)
        run(directory, True)
        run(directory, False, fallocate=True)


if __name__ == "__main__":
    main()
