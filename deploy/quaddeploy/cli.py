"""What the deploy tools share on the command line: a usage error exits 64
(EX_USAGE, as deploy/stack's), not argparse's 2, so a script can tell a
wrong command from a run that failed (1)."""

import argparse
import sys

EX_USAGE = 64


class Parser(argparse.ArgumentParser):
    """argparse's parser, with usage errors that exit EX_USAGE."""

    def error(self, message):
        self.print_usage(sys.stderr)
        self.exit(EX_USAGE, f"{self.prog}: error: {message}\n")
