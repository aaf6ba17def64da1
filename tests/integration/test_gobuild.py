"""tests.controlplane.gobuild, the one builder, with real `go build`s of tiny modules
into a temporary cache: a module of ours, and an upstream source tree the module
proxy refuses (copied, patched, built with a replace), each cached once."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.controlplane.gobuild import GoBuild, SourceTree, binary, folder

pytestmark = pytest.mark.integration

HELLO = 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("hello-tool v0.0.1") }\n'


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AIBOM_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_binary_is_cached_under_its_own_name(tmp_path: Path, cache: Path) -> None:
    # `go build -o DIR/` names a binary after its package's last element
    # (`./cmd/manager` -> `manager`); the cache holds it under the name asked for.
    module = tmp_path / "src"
    (module / "cmd" / "manager").mkdir(parents=True)
    (module / "go.mod").write_text("module example.com/hello\n\ngo 1.22\n")
    (module / "go.sum").write_text("")  # the cache key hashes it
    (module / "cmd" / "manager" / "main.go").write_text(HELLO)
    build = GoBuild(
        name="hello-tool",
        version="v0.0.1",
        mains={"hello-tool": "./cmd/manager"},
        module=module,
        check=("hello-tool", (), "hello-tool v0.0.1"),
    )
    path = binary(build)
    assert path.name == "hello-tool"
    assert os.access(path, os.X_OK)
    assert not (path.parent / "manager").exists()
    assert str(path).startswith(str(cache))
    log = (folder(build) / "build.log").read_text()
    assert binary(build) == path  # the second call is a cache hit: no new build
    assert (folder(build) / "build.log").read_text() == log


def test_a_refused_module_builds_from_its_source_tree_patched_with_a_replace(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream = tmp_path / "upstream"
    tree = upstream / "hello-src" / "operator"
    (tree / "cmd").mkdir(parents=True)
    (tree / "go.mod").write_text(
        "module example.invalid/hello/operator\n\ngo 1.22\n\n"
        "require example.invalid/greeting v0.0.0\n"
    )
    (tree / "go.sum").write_text("")
    main = (
        'package main\n\nimport (\n\t"fmt"\n\n\t"example.invalid/greeting"\n)\n\n'
        'func main() { fmt.Println(greeting.Word + " unpatched") }\n'
    )
    (tree / "cmd" / "main.go").write_text(main)
    dep = upstream / "go-deps" / "greeting"
    dep.mkdir(parents=True)
    (dep / "go.mod").write_text("module example.invalid/greeting\n\ngo 1.22\n")
    (dep / "greeting.go").write_text('package greeting\n\nconst Word = "hello"\n')
    patch = tmp_path / "hello.patch"
    patch.write_text(
        "--- a/operator/cmd/main.go\n+++ b/operator/cmd/main.go\n"
        '@@ -6,4 +6,4 @@\n \t"example.invalid/greeting"\n )\n \n'
        '-func main() { fmt.Println(greeting.Word + " unpatched") }\n'
        '+func main() { fmt.Println(greeting.Word + " patched") }\n'
    )
    monkeypatch.setenv("AIBOM_UPSTREAM_SRC", str(upstream))
    monkeypatch.setenv("GOFLAGS", "")
    build = GoBuild(
        name="hello-operator",
        version="v0.0.1",
        mains={"hello-operator": "./cmd"},
        source=SourceTree(
            module="example.invalid/hello/operator",  # no proxy serves it
            version="v0.0.1",
            commit="0" * 40,
            tree="hello-src",
            build_dir="operator",
            patch=patch,
            replaces={"example.invalid/greeting": "go-deps/greeting"},
        ),
        check=("hello-operator", (), "hello patched"),
    )
    path = binary(build)
    out = subprocess.run([str(path)], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "hello patched"
    assert (tree / "cmd" / "main.go").read_text() == main  # upstream's tree is untouched
    assert not (tree / "go.aibom.mod").exists()
    assert not (folder(build) / "src").exists()  # the copy is gone after the build
    # The key is what the repository says, not the tree: with the tree gone, a
    # machine whose cache holds the build still finds it.
    (upstream / "hello-src").rename(tmp_path / "moved")
    assert binary(build) == path


def test_a_replace_is_added_only_where_the_proxy_refuses_the_module(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A served module (go-logr/logr at the version go.mod requires) comes from the
    proxy even when `replaces` names a folder for it: here a copy that does not
    compile, so the build fails if the replace is added."""
    upstream = tmp_path / "upstream"
    tree = upstream / "served-src"
    (tree / "cmd").mkdir(parents=True)
    (tree / "go.mod").write_text(
        "module example.invalid/served\n\ngo 1.22\n\nrequire github.com/go-logr/logr v1.4.3\n"
    )
    (tree / "go.sum").write_text(
        "github.com/go-logr/logr v1.4.3 h1:CjnDlHq8ikf6E492q6eKboGOC0T8CDaOvkHCIg8idEI=\n"
        "github.com/go-logr/logr v1.4.3/go.mod h1:9T104GzyrTigFIr8wt5mBrctHMim0Nb2HLGrmQ40KvY=\n"
    )
    (tree / "cmd" / "main.go").write_text(
        'package main\n\nimport (\n\t"fmt"\n\n\t"github.com/go-logr/logr"\n)\n\n'
        "func main() { fmt.Println(logr.Discard().Enabled()) }\n"
    )
    broken = upstream / "go-deps" / "logr"
    broken.mkdir(parents=True)
    (broken / "go.mod").write_text("module github.com/go-logr/logr\n\ngo 1.22\n")
    (broken / "logr.go").write_text("package logr\n\nthis does not compile\n")
    monkeypatch.setenv("AIBOM_UPSTREAM_SRC", str(upstream))
    monkeypatch.setenv("GOFLAGS", "")
    build = GoBuild(
        name="served",
        version="v0.0.1",
        mains={"served": "./cmd"},
        source=SourceTree(
            module="example.invalid/served",
            version="v0.0.1",
            commit="0" * 40,
            tree="served-src",
            replaces={"github.com/go-logr/logr": "go-deps/logr"},
        ),
        check=("served", (), "false"),
    )
    out = subprocess.run([str(binary(build))], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "false"
