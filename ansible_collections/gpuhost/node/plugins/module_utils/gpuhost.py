# -*- coding: utf-8 -*-
# Copyright: gpuhost maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Shared code of the gpuhost.node modules: find the gpuhost binary, run it, read its JSON."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

# gpuhost apply / plan exit codes (README "Exit codes").
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INVALID = 2
EXIT_REBOOT_REQUIRED = 3
EXIT_REBOOT_SCHEDULED = 4
EXIT_SIGINT = 130
EXIT_SIGTERM = 143


def gpuhost_bin(module):
    """The gpuhost executable: the `executable` option, else `gpuhost` on the PATH."""
    exe = module.params.get('executable')
    if exe:
        return exe
    return module.get_bin_path('gpuhost', required=True, opt_dirs=['/usr/bin', '/usr/local/bin'])


def run_json(module, argv):
    """Run gpuhost (argv without the binary); return (rc, parsed stdout or None, stdout, stderr)."""
    cmd = [gpuhost_bin(module)] + list(argv)
    rc, out, err = module.run_command(cmd, check_rc=False)
    data = None
    if out and out.strip():
        try:
            data = json.loads(out)
        except ValueError:
            data = None
    return rc, data, out, err, cmd


def last_lines(text, n=5):
    lines = [line for line in (text or '').splitlines() if line.strip()]
    return '\n'.join(lines[-n:])


def set_args(sets):
    argv = []
    for s in sets or []:
        argv.extend(['--set', s])
    return argv
