package main

import (
	"errors"
	"flag"
	"os"

	"github.com/auditlens/auditlens/deploy/release/deps"
	"github.com/auditlens/auditlens/deploy/release/gobuild"
)

// Platforms are those a release ships.
var Platforms = []gobuild.Platform{{OS: "linux", Arch: "amd64"}, {OS: "linux", Arch: "arm64"}, {OS: "darwin", Arch: "amd64"}, {OS: "darwin", Arch: "arm64"}}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	switch args[0] {
	case "sign", "verify", "keygen":
		return runSign(args)
	}
	fs := flag.NewFlagSet("release "+args[0], flag.ContinueOnError)
	repo := fs.String("repo", "../..", "`directory` of the auditlens repository")
	out := fs.String("out", "", "output `path`")
	d := Dist{}
	fs.StringVar(&d.Libchdb, "libchdb", "", "`path` of libchdb.so, shipped in the linux/amd64 archive (dist)")
	fs.StringVar(&d.LibchdbVersion, "libchdb-version", "", "`version` of the npm package @chdb/lib-linux-x64-gnu it comes from (dist)")
	fs.StringVar(&d.Source, "source", "https://github.com/auditlens/auditlens", "the repository's `URL` (dist)")
	fs.StringVar(&d.Download, "download", "", "`URL` the archives are downloaded from (dist; default: the source's releases/download/v<version>/)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *out == "" {
		return errors.New("-out is required")
	}
	switch args[0] {
	case "dist":
		var err error
		if d.Stamp, err = gobuild.StampOf(*repo); err != nil {
			return err
		}
		if d.LibchdbVersion == "" {
			return errors.New("-libchdb-version is required")
		}
		if d.Download == "" {
			d.Download = d.Source + "/releases/download/v" + d.Stamp.Version + "/"
		}
		if d.Modules, err = modules(*repo); err != nil {
			return err
		}
		d.Repo, d.Out = *repo, *out
		return d.Run()
	case "notice":
		mods, err := modules(*repo)
		if err != nil {
			return err
		}
		return os.WriteFile(*out, []byte(Notice(mods)), 0o644)
	}
	return errors.New(usage)
}

const usage = "usage: release notice|dist|sign|verify|keygen [flags]"

// modules is the module graph of every binary on every platform shipped.
func modules(repo string) ([]deps.Module, error) {
	o, err := readOverrides("licenses")
	if err != nil {
		return nil, err
	}
	return deps.List(repo, gobuild.Binaries, Platforms, o)
}
