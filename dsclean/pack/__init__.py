"""Stage: pack a cleaned index into WebDataset tar shards, finish a job array's parts, verify shard sets.

Modules: :mod:`.samples` (keys and members of a sample), :mod:`.tarformat`
(the tar layout), :mod:`.plan` (which sample goes where), :mod:`.shardjob` (one
shard's task and its result), :mod:`.source` (its files, read and checked against
the index), :mod:`.write` (one shard written), :mod:`.readback` (one an earlier run
wrote, read back and checked), :mod:`.bulk` (a batch of samples' headers and JSON at
once, with numpy), :mod:`.runner` (the pool), :mod:`.state` (``pack.json``, parts, locks),
:mod:`.publish` (packed index and ``shardindex.json``), :mod:`.scanhashes` (the scan's
content hashes of unchanged files, reused as checksums), :mod:`.packer` (the
``pack_shards`` and ``finish_pack`` functions), :mod:`.verify` (``dsclean verify``),
:mod:`.decode` (``verify --decode``: the scan's checks on each sample's bytes, in the scan's isolated pool),
:mod:`.extnames` (``--ext-policy``: how media members are named, and the webdataset recipe that reads a set),
:mod:`.mixing` (``verify``'s warning about shards in class blocks), :mod:`.options` (option values the CLI
shares with the packer).

Nothing imports this package but the CLI (and ``dsclean``'s lazy exports).
"""
