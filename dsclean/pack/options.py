"""Values of pack's options that the command line and :mod:`.packer` both name (imports nothing heavy:
the CLI's parser is built on every command's start)."""

#: ``--shuffle``'s default (``PackOptions.shuffle``): the seed the folder's ``pack.json`` records for this
#: index (a resume, a later ``--part``, ``--finish``), else one chosen at random and recorded
RANDOM = "random"
