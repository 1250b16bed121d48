# Sourced by scripts/helm-check and scripts/test.sh: Go-built tools at
# pinned versions, built once from the Go module proxy into a cache folder
# (a second run compiles nothing).
HELM_VERSION=v3.22.0
KUBECONFORM_VERSION=v0.8.0
PROMETHEUS_VERSION=v0.316.0

# presenced_tool NAME PACKAGE VERSION prints the binary's path.
presenced_tool() {
  local dir="${XDG_CACHE_HOME:-$HOME/.cache}/presenced-tools/$1-$3"
  if [ ! -x "$dir/$1" ]; then
    echo "building $1 $3 (once)" >&2
    if ! GOBIN="$dir" nice -n 15 go install "$2@$3" >&2; then
      echo "could not build $1 $3 from the Go module proxy (go install $2@$3, above)" >&2
      return 1
    fi
  fi
  echo "$dir/$1"
}
