"""Fuzz the member walker: a valid shard with a random header field set to random bytes and the checksum
fixed up; the walk must end (TarError or a normal end) within a bounded number of steps."""

import random
import sys

from dsclean.pack.tarformat import TarError, end_of_archive, header, iter_members, padding

random.seed(int(sys.argv[1]) if len(sys.argv) > 1 else 0)


def shard():
    out = b""
    for i in range(4):
        data = bytes(random.randrange(256) for _ in range(random.randint(0, 900)))
        out += header(f"{i:016x}.jpg", len(data)) + data + padding(len(data))
    return out + end_of_archive(len(out))


def fix_checksum(block):
    b = bytearray(block)
    b[148:156] = b" " * 8
    b[148:156] = b"%06o\0 " % sum(b)
    return bytes(b)


stats = {"ok": 0, "TarError": 0}
for trial in range(5000):
    buf = bytearray(shard())
    at = random.choice([0, 512 * random.randint(0, 8)])
    if at + 512 > len(buf):
        at = 0
    field = random.choice([(124, 136), (0, 100), (156, 157), (100, 124), (257, 265)])
    val = bytes(
        random.choice([0, 0x80, 0xFF, 0x30, 0x37, 0x20]) if random.random() < 0.5 else random.randrange(256)
        for _ in range(field[1] - field[0])
    )
    buf[at + field[0] : at + field[1]] = val
    buf[at : at + 512] = fix_checksum(buf[at : at + 512])
    steps = 0
    try:
        for m in iter_members(bytes(buf)):
            steps += 1
            assert steps < len(buf) // 512 + 2, "walk does not advance"
            assert m.offset >= 0 and m.size >= 0 and m.offset + m.size <= len(buf)
        stats["ok"] += 1
    except TarError:
        stats["TarError"] += 1
print("mutated shards walked", sum(stats.values()), stats, "every walk ended, no member outside the file")
