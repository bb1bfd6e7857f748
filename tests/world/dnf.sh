#!/usr/bin/env bash
# Runs the real dnf against an install root made by mkroot.sh, the way gpuhost must:
# the root's own repo files and dnf.conf, file:// baseurls rewritten into the root.
# Usage: dnf.sh WORLD ROOT DNF-ARGS...
set -euo pipefail
world=$(cd "$1" && pwd); root=$(cd "$2" && pwd); shift 2
export HOME=$world/home
major=$(. "$root/etc/os-release"; echo "${VERSION_ID%%.*}")
opts=()
shopt -s nullglob
for f in "$root"/etc/yum.repos.d/*.repo; do
  while IFS= read -r line; do
    case $line in
      \[*\]) id=${line#[}; id=${id%]};;
      baseurl=file://*) opts+=("--setopt=$id.baseurl=file://$root${line#baseurl=file://}");;
    esac
  done < "$f"
done
# DNF_PLUGINCONF: a plugin configuration folder; then the versionlock plugin alone runs.
plugins=(--noplugins)
[ -n "${DNF_PLUGINCONF:-}" ] && plugins=("--setopt=pluginconfpath=$DNF_PLUGINCONF" "--disableplugin=*" --enableplugin=versionlock)
exec dnf --installroot="$root" --releasever="$major" --setopt=reposdir="$root/etc/yum.repos.d" \
  --config="$root/etc/dnf/dnf.conf" "${plugins[@]}" --setopt=cachedir="$root/var/cache/dnf" \
  --setopt=logdir="$root/var/log" "${opts[@]}" "$@"
