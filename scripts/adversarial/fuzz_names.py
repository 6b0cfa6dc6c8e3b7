"""Fuzz the template grammar: random format-ish strings; parse never raises anything but NameTemplateError,
an accepted template names like str.format for ordinary numbers, and is injective over 0..5000."""

import random
import sys

from dsclean.pack import names

random.seed(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
alphabet = "{}:0123456789dsrx!.<>^=+-_,#[]a/ \\%"
tried = accepted = 0
for _ in range(20000):
    t = "".join(random.choice(alphabet) for _ in range(random.randint(1, 12)))
    tried += 1
    try:
        n = names.parse(t)
    except names.NameTemplateError:
        continue
    accepted += 1
    got = [n.name(k) for k in range(0, 5000, 7)]
    assert len(set(got)) == len(got), t
    assert got[:50] == [t.format(k) for k in range(0, 350, 7)], t
    assert all("/" not in g and not g.startswith(".") for g in got), t
print("templates tried", tried, "accepted", accepted, "all injective and equal to str.format")
