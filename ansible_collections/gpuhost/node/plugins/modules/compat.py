#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuhost maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: compat
short_description: Will a CUDA version, requirement or image run on this GPU node?
version_added: 0.1.0
description:
  - Runs C(gpuhost compat --format json) on the node. It answers from the container runtime's
    check of C(NVIDIA_REQUIRE_*) and CUDA's compatibility rules (native, minor-version,
    forward compatibility), before anyone pulls or runs anything.
  - The driver comes from O(driver), else O(profile), else NVML, else the loaded module, else
    the installed package in O(root). Changes nothing.
  - Exactly one of O(cuda), O(require) and O(image) is asked.
options:
  cuda:
    description:
      - A CUDA version, for example C(12.4).
    type: str
  require:
    description:
      - C(NVIDIA_REQUIRE_*) expressions, for example C(cuda>=12.4 brand=tesla,driver>=470).
    type: list
    elements: str
  image:
    description:
      - An image reference (C(docker image inspect)), a C(docker save) tarball or an OCI layout.
    type: str
  driver:
    description:
      - Answer for this driver version instead of the node's.
    type: str
  brand:
    description:
      - The GPU brand as the container runtime names it, when NVML cannot say.
    type: str
  profile:
    description:
      - Answer for the host this profile builds (its driver package).
    type: str
  set:
    description:
      - Profile keys to override with O(profile), each C(key.path=value).
    type: list
    elements: str
    default: []
  root:
    description:
      - An install root whose installed driver package is read.
    type: path
  fail_when_incompatible:
    description:
      - Fail the task when the answer is that it does not run (or runs only under a condition
        gpuhost cannot check). With V(false) the answer is only returned.
    type: bool
    default: true
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
author:
  - gpuhost maintainers (@gpuhost)
'''

EXAMPLES = r'''
- name: Does CUDA 12.4 run on the node's driver?
  gpuhost.node.compat:
    cuda: "12.4"

- name: Would the 12.4 image run on the driver we are about to roll out?
  gpuhost.node.compat:
    image: nvcr.io/nvidia/cuda:12.4.1-runtime-rockylinux8
    driver: 550.54.15
  register: will_it_run

- name: Ask without failing
  gpuhost.node.compat:
    require:
      - cuda>=12.4 brand=tesla,driver>=470,driver<471
    fail_when_incompatible: false
  register: answer
'''

RETURN = r'''
runs:
  description: It runs (natively, or through minor-version or forward compatibility).
  returned: always
  type: bool
verdict:
  description: gpuhost's verdict (C(runs), C(does-not-run), C(depends)).
  returned: always
  type: str
  sample: runs
summary:
  description: The answer in one sentence.
  returned: always
  type: str
hint:
  description: What to do, when it does not run.
  returned: when gpuhost has one
  type: str
answer:
  description: The full answer (C(runtime), C(cuda), C(components)).
  returned: always
  type: dict
host:
  description: The driver, where it was read from, its CUDA, the GPUs.
  returned: always
  type: dict
exit_code:
  description: gpuhost compat's exit code (0 runs, 1 does not run, 2 bad input).
  returned: always
  type: int
'''

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuhost.node.plugins.module_utils.gpuhost import last_lines, run_json, set_args


def main():
    module = AnsibleModule(
        argument_spec=dict(
            cuda=dict(type='str'),
            require=dict(type='list', elements='str'),
            image=dict(type='str'),
            driver=dict(type='str'),
            brand=dict(type='str'),
            profile=dict(type='str'),
            set=dict(type='list', elements='str', default=[]),
            root=dict(type='path'),
            fail_when_incompatible=dict(type='bool', default=True),
            executable=dict(type='path'),
        ),
        mutually_exclusive=[('cuda', 'require', 'image')],
        required_one_of=[('cuda', 'require', 'image')],
        supports_check_mode=True,
    )
    p = module.params
    argv = ['compat', '--format', 'json']
    if p['cuda']:
        argv += ['--cuda', p['cuda']]
    for r in p['require'] or []:
        argv += ['--require', r]
    if p['image']:
        argv += ['--image', p['image']]
    for key in ('driver', 'brand', 'profile', 'root'):
        if p[key]:
            argv += ['--' + key, p[key]]
    argv += set_args(p['set'])
    rc, report, out, err, cmd = run_json(module, argv)
    if not isinstance(report, dict) or 'verdict' not in report:
        msg = (report or {}).get('error') if isinstance(report, dict) else None
        module.fail_json(msg='gpuhost compat exited %d: %s'
                         % (rc, msg or last_lines(err) or last_lines(out) or '(no output)'),
                         exit_code=rc, cmd=cmd, stderr=err, invalid_input=rc == 2)
    result = dict(
        changed=False, exit_code=rc, cmd=cmd,
        runs=rc == 0,
        verdict=report.get('verdict'),
        summary=report.get('summary'),
        answer=report.get('answer'),
        host=report.get('host'),
    )
    if report.get('hint'):
        result['hint'] = report['hint']
    if rc != 0 and p['fail_when_incompatible']:
        msg = 'gpuhost compat: %s' % report.get('summary')
        if report.get('hint'):
            msg += ' — hint: %s' % report['hint']
        module.fail_json(msg=msg, **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
