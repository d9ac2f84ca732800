# shellcheck shell=bash
# Debian/Ubuntu package check shared by scripts/rxe-vm and scripts/test.
# Sourced, not run. The caller sets `prog` (the name used in messages).
: "${prog:?}"

# missing_packages PKG...: print the packages of the list that are not installed.
missing_packages() {
  local pkg status
  for pkg in "$@"; do
    status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null || true)
    [[ $status == ii* ]] || printf '%s\n' "$pkg"
  done
}

# ensure_packages PKG...: install what is missing with apt-get when running as
# root; otherwise stop with a message that lists what to install.
ensure_packages() {
  local -a missing
  if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "$prog: cannot check packages (no dpkg-query): make sure these are installed: $*" >&2
    return 0
  fi
  mapfile -t missing < <(missing_packages "$@")
  ((${#missing[@]} == 0)) && return 0
  if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
    echo "$prog: missing packages: ${missing[*]}" >&2
    echo "$prog: install them with: sudo apt-get install --no-install-recommends ${missing[*]}" >&2
    return 1
  fi
  echo "$prog: installing ${missing[*]}" >&2
  local -a apt=(timeout 1200 apt-get -q -y -o DPkg::Lock::Timeout=600)
  export DEBIAN_FRONTEND=noninteractive
  if ! "${apt[@]}" install --no-install-recommends "${missing[@]}" >&2; then
    # A fresh machine may have no package lists yet.
    "${apt[@]}" update >&2 || return 1
    "${apt[@]}" install --no-install-recommends "${missing[@]}" >&2 || return 1
  fi
}
