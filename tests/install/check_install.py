#!/usr/bin/env python3
"""sgk as users get it (tests/install/meson.build registers each mode).

  plugins     a fresh build of this tree, installed in a scratch prefix: the
              installed library loads its own opencl plugin although an empty
              libsgk-opencl.so lies in the build folder (where the old search
              looked) and in SGK_BACKEND_PATH; a copy of the prefix elsewhere
              still finds its plugins, and sgk-bench runs without
              LD_LIBRARY_PATH; with the plugin gone, the reason names every
              folder searched.
  consumers   this build installed with DESTDIR; consumer.c built through
              pkg-config and through CMake's find_package(sgk CONFIG) and run.
  subproject  a meson parent project using sgk through
              dependency('sgk', fallback : 'sgk'): it builds and runs, and the
              subproject defines neither sgk-bench nor any test.
  wheel       the wheel `pip install .` builds (pyproject.toml), made offline
              through meson-python's build hook with this python, without
              the cuda and hip plugins (whose place is the opencl plugin's);
              it holds the package, libsgk and the plugins and nothing for C
              users; installed with pip --target, it loads its own libsgk
              and plugins and runs the README's Python example.

Exits 0 on success, 77 (skip) when a tool a mode needs is missing, 1 otherwise.
"""
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77


class Failure(Exception):
    pass


def run(cmd, env=None, cwd=None):
    """Runs cmd, returns its stdout; its output goes to the log on failure."""
    p = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True)
    if p.returncode != 0:
        sys.stdout.write(p.stdout)
        raise Failure('%s exited %d' % (' '.join(cmd), p.returncode))
    return p.stdout


def clean_env(**extra):
    """The environment without any library or plugin search path."""
    env = {k: v for k, v in os.environ.items()
           if k not in ('LD_LIBRARY_PATH', 'SGK_BACKEND_PATH')}
    env.update(extra)
    return env


def backend_line(consumer, backend, env):
    for line in run([consumer, 'backends'], env=env).splitlines():
        if line.split(' ', 1)[0] == backend:
            return line
    raise Failure('%s backends printed no line for %s' % (consumer, backend))


def check(ok, what):
    if not ok:
        raise Failure(what)
    print('ok: ' + what)


def build_consumer(cc, out, prefix, rpath):
    run(shlex.split(cc) + [os.path.join(HERE, 'consumer.c'), '-o', out,
                           '-I' + os.path.join(prefix, 'include'),
                           '-L' + os.path.join(prefix, 'lib'), '-lsgk',
                           '-Wl,-rpath,' + rpath])


def mode_plugins(a, tmp):
    if a.opencl_built != '1':
        print('skip: the opencl plugin is not built here, so there is no plugin to install')
        return SKIP
    if not a.meson or not a.ninja:
        print('skip: meson or ninja not found')
        return SKIP
    build, prefix = os.path.join(tmp, 'build'), os.path.join(tmp, 'prefix')
    run([a.meson, 'setup', build, a.source_root, '--prefix', prefix, '--libdir', 'lib',
         '--bindir', 'bin', '-Dbuildtype=plain', '-Dcuda=disabled', '-Dhip=disabled',
         '-Dopencl=enabled', '-Dtests=false', '-Dbench=true'])
    run([a.ninja, '-C', build])
    run([a.meson, 'install', '-C', build, '--no-rebuild', '--quiet'])
    # Placed in the prefix, with an rpath relative to itself, the consumer
    # moves with it.
    consumer = os.path.join(prefix, 'bin', 'consumer')
    build_consumer(a.cc, consumer, prefix, '$ORIGIN/../lib')

    own = backend_line(consumer, 'opencl', clean_env())
    print('installed: ' + own)
    check('not found' not in own and 'dlopen' not in own,
          'the installed library loads its own opencl plugin')

    # The build folder stays behind, stale, and anyone may write in it.
    stale = os.path.join(build, 'backends', 'opencl', 'libsgk-opencl.so')
    os.remove(stale)
    open(stale, 'w').close()
    planted = os.path.join(tmp, 'planted')
    os.mkdir(planted)
    open(os.path.join(planted, 'libsgk-opencl.so'), 'w').close()
    line = backend_line(consumer, 'opencl', clean_env(SGK_BACKEND_PATH=planted))
    print('planted: ' + line)
    check(line == own, 'empty plugins in the build folder and in SGK_BACKEND_PATH are ignored')

    moved = os.path.join(tmp, 'moved')
    shutil.copytree(prefix, moved, symlinks=True)
    shutil.rmtree(prefix)
    shutil.rmtree(build)
    consumer = os.path.join(moved, 'bin', 'consumer')
    line = backend_line(consumer, 'opencl', clean_env())
    print('moved: ' + line)
    check(line == own, 'a copy of the prefix elsewhere finds its plugins')
    run([os.path.join(moved, 'bin', 'sgk-bench'), '--list', '--backend', 'cpu'], env=clean_env())
    check(True, 'the moved sgk-bench runs without LD_LIBRARY_PATH')

    plugin_dir = os.path.join(moved, 'lib', 'sgk')
    os.remove(os.path.join(plugin_dir, 'libsgk-opencl.so'))
    extra = [os.path.join(tmp, 'extra1'), os.path.join(tmp, 'extra2')]
    for d in extra:
        os.mkdir(d)
    line = backend_line(consumer, 'opencl', clean_env(SGK_BACKEND_PATH=':'.join(extra)))
    print('removed: ' + line)
    check('not found' in line and all(d in line for d in [plugin_dir] + extra),
          'the reason names the plugin folder and each SGK_BACKEND_PATH folder')
    return 0


def mode_consumers(a, tmp):
    missing = [n for n, v in [('meson', a.meson), ('pkg-config', a.pkg_config),
                              ('cmake', a.cmake)] if not v]
    if missing:
        print('skip: %s not found' % ', '.join(missing))
        return SKIP
    dest = os.path.join(tmp, 'dest')
    run([a.meson, 'install', '-C', a.build_root, '--no-rebuild', '--quiet', '--destdir', dest])
    root = lambda p: dest + p  # an install path under DESTDIR
    libdir = root(a.libdir)

    # pkg-config: the .pc file relocated to where DESTDIR put it.
    env = clean_env(PKG_CONFIG_PATH=os.path.join(libdir, 'pkgconfig'))
    pc = [a.pkg_config, '--define-variable=prefix=' + root(a.prefix), 'sgk']
    flags = run(pc[:1] + ['--cflags', '--libs'] + pc[1:], env=env).split()
    plugindir = run(pc[:1] + ['--variable=plugindir'] + pc[1:], env=env).strip()
    check(os.path.normpath(plugindir) == os.path.normpath(os.path.join(libdir, 'sgk')),
          'sgk.pc gives plugindir = <libdir>/sgk (%s)' % plugindir)
    san = [] if a.sanitize == 'none' else ['-fsanitize=' + a.sanitize]
    exe = os.path.join(tmp, 'consumer-pkgconfig')
    run(shlex.split(a.cc) + san + [os.path.join(HERE, 'consumer.c'), '-o', exe] + flags +
        ['-Wl,-rpath,' + libdir], env=env)
    out = run([exe], env=clean_env())
    check(out.startswith('sgk '), 'the pkg-config consumer runs: ' + out.strip())

    # CMake: find_package(sgk CONFIG) from the prefix under DESTDIR.
    cbuild = os.path.join(tmp, 'cmake-build')
    run([a.cmake, '-S', os.path.join(HERE, 'cmake'), '-B', cbuild,
         '-DCMAKE_PREFIX_PATH=' + root(a.prefix), '-DCMAKE_C_COMPILER=' + shlex.split(a.cc)[-1],
         '-DCMAKE_C_FLAGS=' + ' '.join(san)],
        env=clean_env())
    run([a.cmake, '--build', cbuild], env=clean_env())
    out = run([os.path.join(cbuild, 'consumer')], env=clean_env())
    check(out.startswith('sgk '), 'the CMake consumer (sgk::sgk) runs: ' + out.strip())
    return 0


def mode_subproject(a, tmp):
    if not a.meson or not a.ninja:
        print('skip: meson or ninja not found')
        return SKIP
    parent = os.path.join(tmp, 'parent')
    os.makedirs(os.path.join(parent, 'subprojects'))
    shutil.copy(os.path.join(HERE, 'subproject', 'meson.build'), parent)
    shutil.copy(os.path.join(HERE, 'consumer.c'), parent)
    os.symlink(a.source_root, os.path.join(parent, 'subprojects', 'sgk'))
    build = os.path.join(tmp, 'build')
    # forcefallback: an sgk installed on this machine must not stand in.
    run([a.meson, 'setup', build, parent, '--force-fallback-for=sgk', '-Dbuildtype=plain',
         '-Dsgk:cuda=disabled', '-Dsgk:hip=disabled', '-Dsgk:opencl=disabled'])
    targets = json.loads(run([a.meson, 'introspect', '--targets', build]))
    tests = json.loads(run([a.meson, 'introspect', '--tests', build]))
    names = sorted(t['name'] for t in targets if t.get('subproject') == 'sgk')
    print('sgk targets in the parent: ' + ' '.join(names))
    check('sgk' in names, 'the subproject defines libsgk')
    check(not any(n.startswith('sgk-bench') for n in names), 'the subproject defines no sgk-bench')
    check(not any(n.startswith('test_') or n.startswith('sgk_ref') for n in names),
          'the subproject defines no test program')
    check(tests == [], 'the parent build has no tests of sgk')
    run([a.ninja, '-C', build])
    out = run([os.path.join(build, 'consumer')], env=clean_env())
    check(out.startswith('sgk '), 'the parent project\'s consumer runs: ' + out.strip())
    return 0


# meson-python's PEP 517 hook, as pip calls it, with config settings as lists
# (pip before 23.1 keeps only the last of several -C values of one key).
BUILD_WHEEL = """
import sys, mesonpy
print(mesonpy.build_wheel(sys.argv[1], {'builddir': sys.argv[2],
                                        'setup-args': ['-Dcuda=disabled', '-Dhip=disabled']}))
"""

WHEEL_PROBE = """
import importlib.metadata, sgk, sgk._lib, sgk._fast
print(sgk._lib.lib()._name)
print(sgk.version())
print(importlib.metadata.version('sgk'))
print([b.reason for b in sgk.backends() if b.name == 'opencl'][0])
"""


def mode_wheel(a, tmp):
    for module, package in [('mesonpy', 'python3-mesonpy'), ('pip', 'python3-pip'),
                            ('numpy', 'python3-numpy')]:
        try:
            __import__(module)
        except ImportError as e:
            print('skip: %s is not importable by %s (%s; Debian: %s)'
                  % (module, sys.executable, e, package))
            return SKIP
    headers = os.path.join(sysconfig.get_paths()['include'], 'Python.h')
    if not os.path.exists(headers):
        print('skip: %s is not there (the wheel builds sgk._fast; Debian: python3-dev)' % headers)
        return SKIP
    out = os.path.join(tmp, 'dist')
    os.mkdir(out)
    # meson-python 0.12 writes its native file into the source tree.
    native_file = os.path.join(a.source_root, '.mesonpy-native-file.ini')
    left = os.path.exists(native_file)
    try:
        name = run([sys.executable, '-c', BUILD_WHEEL, out, os.path.join(tmp, 'build')],
                   cwd=a.source_root).strip().splitlines()[-1]
    finally:
        if not left and os.path.exists(native_file):
            os.remove(native_file)
    wheel = os.path.join(out, name)
    check(name.startswith('sgk-%s-' % a.version), 'the wheel %s has the version of meson.build' % name)

    with zipfile.ZipFile(wheel) as z:
        files = z.namelist()
    print('wheel: ' + ' '.join(sorted(files)))
    # Every module of the package in this tree, so that a new one cannot be left out.
    src = os.path.join(a.source_root, 'python')
    modules = sorted(os.path.relpath(os.path.join(d, f), src).replace(os.sep, '/')
                     for d, _, fs in os.walk(os.path.join(src, 'sgk')) for f in fs if f.endswith('.py'))
    check(any(f.startswith('sgk/_fast.') and f.endswith('.so') for f in files), 'the wheel holds sgk._fast')
    want = modules + ['sgk/_native/libsgk.so']
    if a.opencl_built == '1':
        want.append('sgk/_native/sgk/libsgk-opencl.so')
    check(all(f in files for f in want), 'the wheel holds ' + ', '.join(want))
    meta = 'sgk-%s.dist-info/' % a.version
    stray = [f for f in files if not (f.startswith('sgk/') or f.startswith(meta))
             or f.endswith(('.h', '.pc', '.cmake'))]
    check(stray == [], 'nothing else: no headers, pkg-config, CMake files or programs %s' % stray)

    site = os.path.join(tmp, 'site')
    run([sys.executable, '-m', 'pip', 'install', '--quiet', '--no-deps', '--no-index',
         '--target', site, wheel])
    env = {k: v for k, v in clean_env(PYTHONPATH=site).items() if k != 'SGK_LIBRARY'}
    loaded, version, dist_version, opencl = run(
        [sys.executable, '-c', WHEEL_PROBE], env=env, cwd=tmp).splitlines()[-4:]
    check(loaded == os.path.join(site, 'sgk', '_native', 'libsgk.so'),
          'sgk loads the libsgk inside the package: ' + loaded)
    check(version == dist_version == a.version,
          'sgk.version() %s, the installed distribution %s, meson.build %s'
          % (version, dist_version, a.version))
    if a.opencl_built == '1':
        print('opencl: ' + (opencl or 'available'))
        check('not found' not in opencl and 'dlopen' not in opencl,
              'libsgk loads the opencl plugin from sgk/_native/sgk')
    sys.stdout.write(run([sys.executable, os.path.join(a.source_root, 'tests', 'check_readme_example.py'),
                          '--python', os.path.join(a.source_root, 'README.md')], env=env, cwd=tmp))
    check(True, "the README's Python example runs on the installed package")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('mode', choices=['plugins', 'consumers', 'subproject', 'wheel'])
    p.add_argument('--source-root', required=True)
    p.add_argument('--cc', required=True)
    p.add_argument('--meson', default='')
    p.add_argument('--ninja', default='')
    p.add_argument('--opencl-built', default='0')
    p.add_argument('--build-root')
    p.add_argument('--prefix')
    p.add_argument('--libdir')
    p.add_argument('--sanitize', default='none')
    p.add_argument('--pkg-config', default='')
    p.add_argument('--cmake', default='')
    p.add_argument('--version', default='')
    a = p.parse_args()
    mode = {'plugins': mode_plugins, 'consumers': mode_consumers, 'subproject': mode_subproject,
            'wheel': mode_wheel}
    tmp = os.path.realpath(tempfile.mkdtemp(prefix='sgk-install-'))
    try:
        return mode[a.mode](a, tmp)
    except Failure as e:
        print('FAIL: %s' % e)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == '__main__':
    sys.exit(main())
