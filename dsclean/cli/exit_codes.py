"""Exit codes shared by every ``dsclean`` command."""

EXIT_OK = 0  # done
EXIT_FOUND_BAD = 1  # findings: --check found bad files, a restore refused entries
EXIT_USAGE = 2  # usage error or bad input, with a message naming the file and the reason
EXIT_INCOMPLETE = 3  # some moves or writes failed (a full disk, a read-only tree): state consistent, failures listed
# 128 + signal number (130 SIGINT, 143 SIGTERM): interrupted after flushing what was decided
