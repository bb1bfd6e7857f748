#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: apply
short_description: Converge an Oracle Linux GPU node to a gpuhost profile
version_added: 0.1.0
description:
  - Runs C(gpuhost apply --format json) (in check mode C(gpuhost plan --format json)) on the
    node and turns its report into a task result.
  - Every step of gpuhost first checks the host and changes only what differs, so a second run
    on a converged node reports C(changed=false) and starts no package transaction.
  - In check mode nothing is changed; with C(--diff) the typed changes of every step that would
    change are shown (install packages, enable a module stream, write a file, enable a unit,
    build a module).
  - A reboot is never made by this module itself. When the node needs one, C(reboot_required)
    is true; use M(ansible.builtin.reboot) (the C(gpuhost.node.rolling_upgrade) role does), or
    O(reboot=slurm) to have Slurm reboot the node once its jobs have ended.
options:
  profile:
    description:
      - A built-in profile (C(ol8-uek), C(ol8-rhck), C(ol9-uek), C(ol9-rhck)) or the path of a
        profile file on the node (C(gpuhost apply --profile)).
      - With O(bundle), only the bundle's own profile may be named.
    type: str
  set:
    description:
      - Profile keys to override, each C(key.path=value) (C(gpuhost apply --set)), for example
        C(driver.local_repo_rpm=/srv/cuda-repo-rhel8-12-4-local-12.4.1_550.54.15-1.x86_64.rpm).
    type: list
    elements: str
    default: []
  root:
    description:
      - Act on an install root instead of the running system (image builds, tests).
    type: path
    default: /
  only:
    description:
      - Run only these steps (C(gpuhost steps) lists them).
    type: list
    elements: str
    default: []
  skip:
    description:
      - Skip these steps.
    type: list
    elements: str
    default: []
  bundle:
    description:
      - Take the profile and every package from this bundle (directory or C(.tar) made by
        C(gpuhost bundle)) on the node; it is verified first and dnf uses no other repo.
    type: path
  kernel_release:
    description:
      - Provision for this kernel release instead of the running (in a root, the newest) one.
    type: str
  reboot:
    description:
      - What to do when the node needs a reboot to finish.
      - V(never) reports C(reboot_required=true) and leaves the reboot to the play.
      - >-
        V(slurm) asks Slurm to reboot the node once its jobs have ended
        (C(gpuhost apply --reboot --reboot-via slurm), which runs
        C(scontrol reboot ASAP nextstate=DOWN reason="gpuhost: ...")); gpuhost-resume.service
        repeats the apply after the boot and the node stays down until C(gpuhost status --slurm)
        finds it healthy. The task then returns C(reboot_scheduled=true).
    type: str
    choices: [never, slurm]
    default: never
  max_reboots:
    description:
      - Loop guard with O(reboot=slurm), giving up after this many reboots in one chain.
    type: int
    default: 3
  executable:
    description:
      - The gpuhost binary (default C(gpuhost) on the PATH).
    type: path
attributes:
  check_mode:
    description: Runs C(gpuhost plan), which checks every step and changes nothing.
    support: full
  diff_mode:
    description: Shows, per step, the typed changes made (or, in check mode, predicted).
    support: full
requirements:
  - gpuhost on the node
notes:
  - gpuhost exit codes map to results as follows. 0 converged. 3 converged but a reboot is
    required (not a failure; C(reboot_required=true)). 4 Slurm will reboot the node (not a
    failure). 1 a step failed (the message names the step and gpuhost's hint). 2 invalid input
    or unsupported host, nothing was changed (the result has C(invalid_input=true)).
    130 and 143 the run was stopped by a signal.
seealso:
  - module: gpuhost.node.status
  - module: ansible.builtin.reboot
author:
  - gpuhost maintainers (@gpuhost)
'''

EXAMPLES = r'''
- name: Converge the node to the site profile
  gpuhost.node.apply:
    profile: /etc/gpuhost/site.toml
  register: gpuhost

- name: Upgrade the driver (check mode and --diff show what would change)
  gpuhost.node.apply:
    profile: ol8-uek
    set:
      - driver.local_repo_rpm=/srv/nvidia/cuda-repo-rhel8-12-4-local-12.4.1_550.54.15-1.x86_64.rpm
      - driver.replace_local_repo=true
  register: upgrade

- name: Reboot when gpuhost says so
  ansible.builtin.reboot:
  when: upgrade.reboot_required

- name: Only the container runtime, on an image being built
  gpuhost.node.apply:
    profile: ol9-uek
    root: /mnt/image
    only: [docker, container-toolkit, daemon-json, services]

- name: Let Slurm reboot the node when its jobs have ended
  gpuhost.node.apply:
    profile: ol8-uek
    reboot: slurm
'''

RETURN = r'''
changed:
  description: True exactly when a step changed something (in check mode, would change).
  returned: always
  type: bool
reboot_required:
  description: The node needs a reboot to finish (gpuhost exit code 3 or 4).
  returned: always
  type: bool
  sample: false
reboot_reasons:
  description: Why a reboot is required, one C(step - reason) each.
  returned: always
  type: list
  elements: str
  sample: ["nouveau: nouveau is loaded now; the NVIDIA module can load only after a reboot"]
reboot_scheduled:
  description: Slurm was asked to reboot the node (O(reboot=slurm)).
  returned: always
  type: bool
changed_steps:
  description: The ids of the steps that changed (in check mode, would change).
  returned: always
  type: list
  elements: str
  sample: [driver-repo, driver, kernel-module]
failed_step:
  description: The first step that failed.
  returned: on failure of a step
  type: str
  sample: driver-repo
hint:
  description: What to do about the failure, from gpuhost.
  returned: on failure, when gpuhost has a hint
  type: str
invalid_input:
  description: gpuhost refused the input or the host (exit 2); nothing was changed.
  returned: always
  type: bool
exit_code:
  description: gpuhost's exit code (not C(rc), which Ansible would read as a failure when not 0).
  returned: always
  type: int
summary:
  description: gpuhost's one-line summary of the run.
  returned: when gpuhost printed a report
  type: str
  sample: "converged — steps: 3 changed, 9 unchanged, 4 skipped; 0 deferred actions; 0 warnings"
steps:
  description: Every step with its C(id), C(outcome), C(reason), C(changes), C(hint),
    C(reboot_required) and C(deferred) actions (the report without the commands run).
  returned: when gpuhost printed a report
  type: list
  elements: dict
deferred:
  description: Actions only a live run can do (in an install root, what its first boot owes).
  returned: when gpuhost printed a report
  type: list
  elements: str
warnings_reported:
  description: What gpuhost found worth a look without failing.
  returned: when gpuhost printed a report
  type: list
  elements: str
cmd:
  description: The gpuhost command line that ran.
  returned: always
  type: list
  elements: str
'''

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.node.plugins.module_utils.gpuhost import (
    EXIT_FAILED,
    EXIT_INVALID,
    EXIT_OK,
    EXIT_REBOOT_REQUIRED,
    EXIT_REBOOT_SCHEDULED,
    EXIT_SIGINT,
    EXIT_SIGTERM,
    last_lines,
    run_json,
    set_args,
)

STEP_KEYS = ('id', 'outcome', 'reason', 'changes', 'hint', 'reboot_required', 'deferred', 'duration_ms')


def build_argv(p, check_mode):
    argv = ['plan' if check_mode else 'apply', '--format', 'json']
    if p['bundle']:
        argv += ['--bundle', p['bundle']]
    if p['profile']:
        argv += ['--profile', p['profile']]
    argv += ['--root', p['root']]
    argv += set_args(p['set'])
    if p['only']:
        argv += ['--only', ','.join(p['only'])]
    if p['skip']:
        argv += ['--skip', ','.join(p['skip'])]
    if p['kernel_release']:
        argv += ['--kernel-release', p['kernel_release']]
    if not check_mode and p['reboot'] == 'slurm':
        argv += ['--reboot', '--reboot-via', 'slurm', '--max-reboots', str(p['max_reboots'])]
    return argv


def render_diff(steps, check_mode, root):
    """The typed changes, per step, as a prepared diff."""
    lines = []
    for s in steps:
        if s.get('outcome') not in ('changed', 'would-change', 'failed') or not s.get('changes'):
            continue
        lines.append('%s (%s):' % (s['id'], s['outcome']))
        for c in s['changes']:
            lines.append('+ %s' % c)
    if not lines:
        return None
    head = 'gpuhost %s on %s' % ('plan' if check_mode else 'apply', root)
    return '--- %s: before\n+++ %s: after\n%s\n' % (head, head, '\n'.join(lines))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            profile=dict(type='str'),
            set=dict(type='list', elements='str', default=[]),
            root=dict(type='path', default='/'),
            only=dict(type='list', elements='str', default=[]),
            skip=dict(type='list', elements='str', default=[]),
            bundle=dict(type='path'),
            kernel_release=dict(type='str'),
            reboot=dict(type='str', choices=['never', 'slurm'], default='never'),
            max_reboots=dict(type='int', default=3),
            executable=dict(type='path'),
        ),
        required_one_of=[('profile', 'bundle')],
        supports_check_mode=True,
    )
    p = module.params
    check_mode = module.check_mode
    rc, report, out, err, cmd = run_json(module, build_argv(p, check_mode))

    result = dict(
        changed=False,
        exit_code=rc,
        cmd=cmd,
        reboot_required=False,
        reboot_reasons=[],
        reboot_scheduled=False,
        changed_steps=[],
        invalid_input=rc == EXIT_INVALID,
    )
    if not isinstance(report, dict):
        module.fail_json(
            msg='gpuhost %s exited %d without a report: %s'
            % (cmd[1], rc, last_lines(err) or last_lines(out) or '(no output)'),
            stderr=err, stdout=out, **result)

    steps = [dict((k, s.get(k)) for k in STEP_KEYS if k in s) for s in report.get('steps', [])]
    changed_outcome = 'would-change' if check_mode else 'changed'
    result['changed_steps'] = [s['id'] for s in steps if s.get('outcome') == changed_outcome]
    result['changed'] = bool(result['changed_steps'])
    result['reboot_reasons'] = list(report.get('reboot_required') or [])
    result['reboot_required'] = bool(result['reboot_reasons']) or rc in (EXIT_REBOOT_REQUIRED, EXIT_REBOOT_SCHEDULED)
    result['reboot_scheduled'] = rc == EXIT_REBOOT_SCHEDULED
    result['steps'] = steps
    result['summary'] = report.get('summary', report.get('error'))
    result['deferred'] = report.get('deferred', [])
    result['warnings_reported'] = report.get('warnings', [])
    if report.get('reboot') is not None:
        result['reboot'] = report['reboot']
    if module._diff:
        prepared = render_diff(steps, check_mode, p['root'])
        if prepared:
            result['diff'] = dict(prepared=prepared)

    if rc in (EXIT_OK, EXIT_REBOOT_REQUIRED, EXIT_REBOOT_SCHEDULED):
        module.exit_json(**result)

    failed = [s for s in steps if s.get('outcome') in ('failed', 'partial')]
    if failed:
        first = failed[0]
        result['failed_step'] = first['id']
        if first.get('hint'):
            result['hint'] = first['hint']
        msg = 'gpuhost %s: step %s failed: %s' % (cmd[1], first['id'], first.get('reason', ''))
        if first.get('hint'):
            msg += ' — hint: %s' % first['hint']
        if len(failed) > 1:
            msg += ' (also failed: %s)' % ', '.join(s['id'] for s in failed[1:])
    else:
        msg = 'gpuhost %s: %s' % (cmd[1], report.get('error') or report.get('summary') or last_lines(err))
        if report.get('hint'):
            result['hint'] = report['hint']
            msg += ' — hint: %s' % report['hint']
    if rc == EXIT_INVALID:
        msg = 'invalid input (gpuhost exit 2, nothing was changed): ' + msg
    elif rc in (EXIT_SIGINT, EXIT_SIGTERM):
        msg = 'interrupted (gpuhost exit %d): %s' % (rc, report.get('interrupted') or msg)
    elif rc != EXIT_FAILED:
        msg = 'gpuhost exit %d: %s' % (rc, msg)
    module.fail_json(msg=msg, stderr=err, **result)


if __name__ == '__main__':
    main()
