"""Exit codes shared by every ``dsclean`` command."""

EXIT_OK = 0  # done
EXIT_FOUND_BAD = 1  # findings: --check found bad files, a restore refused entries
EXIT_USAGE = 2  # usage error or bad input, with a message naming the file and the reason
