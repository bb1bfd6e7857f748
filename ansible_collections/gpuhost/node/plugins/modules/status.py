#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: status
short_description: GPU node health from gpuhost, as facts
version_added: 0.1.0
description:
  - Runs C(gpuhost status --format json) on the node (NVML, sysfs, the kernel log, services)
    and sets its report as the fact C(gpuhost_status).
  - Fails when the verdict is one of O(fail_on). Changes nothing.
  - With O(wait_healthy), looks again and again until the node is healthy (OK or WARNING), for
    at most that many seconds (C(gpuhost status --wait-healthy)), as a gate after a reboot.
options:
  profile:
    description:
      - A profile giving the expected GPU count and driver version (C(gpuhost status --profile)).
    type: str
  expect_gpus:
    description:
      - GPUs this node must have (overrides the profile's C(status.expect_gpus)).
    type: int
  timeout:
    description:
      - Deadline for the NVML probe, in seconds; past it the driver is reported unresponsive.
    type: float
    default: 10
  wait_healthy:
    description:
      - Wait up to this many seconds for a healthy node (OK or WARNING) before judging it.
    type: float
  poll:
    description:
      - With O(wait_healthy), seconds between looks.
    type: float
    default: 5
  active:
    description:
      - Also run work on every GPU and judge it (C(gpuhost status --active)) - HBM bandwidth and
        integrity, PCIe, known-answer FP32/FP64 compute, peer copies - in a few seconds, with
        nothing but the driver. With O(wait_healthy), once the node is healthy by its counters.
      - GPUs with compute processes on them are left alone (WARNING) unless O(force).
    type: bool
    default: false
  active_seconds:
    description:
      - With O(active), the time limit of the GPU work, in seconds.
    type: float
    default: 30
  force:
    description:
      - With O(active), check GPUs that have compute processes on them too.
    type: bool
    default: false
  fail_on:
    description:
      - The verdicts that fail the task.
    type: list
    elements: str
    choices: [WARNING, CRITICAL, UNKNOWN]
    default: [CRITICAL, UNKNOWN]
  snapshot:
    description:
      - Judge a snapshot saved earlier with C(gpuhost status --dump-snapshot) (a file on the
        node) instead of looking at the node now, for example one captured from a node that
        has since been reimaged.
    type: path
  executable:
    description:
      - The gpuhost binary (default C(gpuhost) on the PATH).
    type: path
attributes:
  check_mode:
    description: Reads only; runs the same in check mode.
    support: full
  diff_mode:
    description: Nothing to show.
    support: none
requirements:
  - gpuhost on the node
seealso:
  - module: gpuhost.node.apply
author:
  - gpuhost maintainers (@gpuhost)
'''

EXAMPLES = r'''
- name: Node health as facts; fail on CRITICAL or UNKNOWN
  gpuhost.node.status:
    expect_gpus: 8

- name: Stricter, a WARNING fails too
  gpuhost.node.status:
    profile: /etc/gpuhost/site.toml
    fail_on: [WARNING, CRITICAL, UNKNOWN]

- name: Gate after a reboot (up to 15 minutes)
  gpuhost.node.status:
    profile: ol8-uek
    wait_healthy: 900

- name: Gate that also runs work on every GPU (HBM, PCIe, known-answer compute)
  gpuhost.node.status:
    profile: ol8-uek
    wait_healthy: 900
    active: true

- name: Only collect, never fail
  gpuhost.node.status:
    fail_on: []
  register: health

- ansible.builtin.debug:
    msg: "{{ ansible_facts.gpuhost_status.status }}: {{ health.problems }}"
'''

RETURN = r'''
verdict:
  description: The node's verdict.
  returned: always
  type: str
  sample: OK
problems:
  description: Every check that is not OK, as C(SEVERITY check [gpuN] - value).
  returned: always
  type: list
  elements: str
  sample: ["CRITICAL gpu.ecc.volatile_uncorrected gpu5: 3 uncorrectable ECC error(s) since the driver loaded"]
exit_code:
  description: gpuhost's exit code (not C(rc), which Ansible reads as a failure when not 0); Nagios, with O(wait_healthy) 0 healthy, 2 not in time.
  returned: always
  type: int
ansible_facts:
  description: Facts set on the node.
  returned: always
  type: complex
  contains:
    gpuhost_status:
      description: The JSON report of C(gpuhost status --format json) (C(status), C(summary),
        C(checks), C(snapshot), ...).
      type: dict
      returned: always
'''

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.node.plugins.module_utils.gpuhost import last_lines, run_json

VERDICTS = ('OK', 'WARNING', 'CRITICAL', 'UNKNOWN')


def main():
    module = AnsibleModule(
        argument_spec=dict(
            profile=dict(type='str'),
            expect_gpus=dict(type='int'),
            timeout=dict(type='float', default=10),
            wait_healthy=dict(type='float'),
            poll=dict(type='float', default=5),
            active=dict(type='bool', default=False),
            active_seconds=dict(type='float', default=30),
            force=dict(type='bool', default=False),
            fail_on=dict(type='list', elements='str', choices=['WARNING', 'CRITICAL', 'UNKNOWN'],
                         default=['CRITICAL', 'UNKNOWN']),
            snapshot=dict(type='path'),
            executable=dict(type='path'),
        ),
        supports_check_mode=True,
    )
    p = module.params
    argv = ['status', '--format', 'json']
    if p['profile']:
        argv += ['--profile', p['profile']]
    if p['expect_gpus'] is not None:
        argv += ['--expect-gpus', str(p['expect_gpus'])]
    if p['wait_healthy'] is not None:
        argv += ['--wait-healthy', '--timeout', str(p['wait_healthy']), '--poll', str(p['poll'])]
    else:
        argv += ['--timeout', str(p['timeout'])]
    if p['snapshot']:
        argv += ['--from-snapshot', p['snapshot']]
    if p['active']:
        argv += ['--active', '--active-seconds', str(p['active_seconds'])]
        if p['force']:
            argv += ['--force']
    rc, report, out, err, cmd = run_json(module, argv)
    if not isinstance(report, dict) or report.get('status') not in VERDICTS:
        module.fail_json(msg='gpuhost status exited %d without a report: %s'
                         % (rc, last_lines(err) or last_lines(out) or '(no output)'),
                         exit_code=rc, cmd=cmd, stderr=err)
    verdict = report['status']
    problems = []
    for c in report.get('checks', []):
        sev = c.get('severity')
        if sev in ('WARNING', 'CRITICAL', 'UNKNOWN'):
            gpu = c.get('gpu')
            where = ''
            if isinstance(gpu, dict):
                if gpu.get('index') is not None:
                    where = ' gpu%s' % gpu['index']
                elif gpu.get('pci_bus_id'):
                    where = ' %s' % gpu['pci_bus_id']
            problems.append('%s %s%s: %s' % (sev, c.get('id'), where, c.get('value')))
    result = dict(changed=False, exit_code=rc, cmd=cmd, verdict=verdict, problems=problems,
                  ansible_facts=dict(gpuhost_status=report))
    if verdict in p['fail_on']:
        waited = ''
        if p['wait_healthy'] is not None:
            waited = ' (not healthy within %s s)' % p['wait_healthy']
        result['msg'] = 'gpuhost status %s%s: %s' % (
            verdict, waited, '; '.join(problems[:5]) or 'no check named')
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
