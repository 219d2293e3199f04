#!/bin/sh
# Builder stage only: compile the ns-3 module, then drop from the venv what the image never uses
# at run time, and check that what is left still loads. Prints the sizes before and after.
#  - the ns3 wheel's headers (include/, ~155 MB): only the compiler reads them, and the module is
#    compiled here; at run time cling parses only the module's own facade header.
#  - the ns3 wheel's libraries that the module does not link (lte, wifi, ...): kept are exactly
#    those that ldd resolves for the module's library and test binary.
# (Not stripped: `strip` breaks the auditwheel-patched libraries that wheels vendor, e.g. numpy's
# OpenBLAS: "ELF load command address/offset not page-aligned".)
set -eu
site=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
before=$(du -sm "$VIRTUAL_ENV" | cut -f1)
build=$(python -c 'from netbackend.ns3.build import ensure_built; print(ensure_built().root)')
ln -sfn "$build" "$HETEROSIM_NS3_PREBUILT"
# the flow backend's compiled rate engine, into the same cache (the Python engine runs where it cannot be built)
python -c 'from netbackend import flowcore; flowcore.load() or print("slim-venv: flow engine not compiled:", flowcore.why_not)'
chmod -R a+rX "$HETEROSIM_CACHE_DIR"

ns3=$site/ns3
bins="$build/libheterosim-rdma.so $build/heterosim-rdma-test $build/heterosim-rdma-incast"
keep=$(ldd $bins | awk -v d="$ns3/" 'index($3, d) == 1 {print $3}' | sort -u)
[ -n "$keep" ] || { echo "slim-venv: ldd found no ns3 library under $ns3" >&2; exit 1; }
rm -rf "$ns3/include" "$ns3/libexec" "$ns3/visualizer" "$ns3/lib64/cmake" "$ns3/lib64/pkgconfig"
for lib in "$ns3"/lib64/*.so*; do
    case " $(echo $keep) " in *" $lib "*) ;; *) rm -f "$lib" ;; esac
done

if ldd $bins | grep -q 'not found'; then
    ldd $bins >&2
    exit 1
fi
# What is left still loads: the Python stack, and the module through HETEROSIM_NS3_PREBUILT (the
# wheel's headers are gone, so the build check falls back to the prebuilt module as at run time).
python -c "import numpy, matplotlib.pyplot, pydantic, networkx, yaml, heterosim.cli
from netbackend.ns3.build import ensure_built
from netbackend.ns3.driver import sim_class
assert str(ensure_built().root) == '$HETEROSIM_NS3_PREBUILT', ensure_built().root
sim_class()"
echo "slim-venv: kept $(echo $keep | wc -w) ns3 libraries; venv ${before} MB -> $(du -sm "$VIRTUAL_ENV" | cut -f1) MB"
