package main

import (
	"bufio"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/auditlens/auditlens/lib/kubeapi"
	"github.com/auditlens/auditlens/lib/kubeversion"
)

// kindInfo is what one module version says about one kind of one group/version package.
type kindInfo struct {
	Group, Version, Kind string
	// Introduced, Deprecated, Removed are unset when not tagged.
	Introduced, Deprecated, Removed kubeversion.Version
	// Replacement is the tagged replacement, or zero.
	Replacement gvk
	// Tagged: the package has lifecycle data for this kind.
	Tagged bool
	// Resource is the REST resource (lower-case plural); "" for kinds that are not resources
	// (lists, options, subresource bodies such as Eviction or Scale).
	Resource string
}

type gvk struct{ Group, Version, Kind string }

func (g gvk) String() string { return gv(g.Group, g.Version) + " " + g.Kind }

func gv(group, version string) string {
	if group == "" {
		return version
	}
	return group + "/" + version
}

var versionDirRE = regexp.MustCompile(`^v[0-9]+((alpha|beta)[0-9]+)?$`)

// readModule returns every kind of every GROUP/VERSION package under root (the folder that
// holds the group folders of one module version).
func readModule(fsys fs.FS, root string) ([]kindInfo, error) {
	groups, err := fs.ReadDir(fsys, root)
	if err != nil {
		return nil, fmt.Errorf("read module folder: %w", err)
	}
	var out []kindInfo
	for _, g := range groups {
		if !g.IsDir() {
			continue
		}
		versions, err := fs.ReadDir(fsys, path.Join(root, g.Name()))
		if err != nil {
			return nil, err
		}
		for _, v := range versions {
			if !v.IsDir() || !versionDirRE.MatchString(v.Name()) {
				continue
			}
			kinds, err := readPackage(fsys, path.Join(root, g.Name(), v.Name()), v.Name())
			if err != nil {
				return nil, fmt.Errorf("%s/%s: %w", g.Name(), v.Name(), err)
			}
			out = append(out, kinds...)
		}
	}
	return out, nil
}

var errNoGroup = errors.New("no +groupName tag or GroupName constant")

// readPackage reads one API package: its group name, the kinds its types declare with their
// client-gen tags, and the lifecycle functions of zz_generated.prerelease-lifecycle.go.
func readPackage(fsys fs.FS, dir, version string) ([]kindInfo, error) {
	files, err := fs.Glob(fsys, path.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	group, haveGroup := "", false
	types := map[string]typeTags{}
	var lifecycle string
	for _, f := range files {
		base := path.Base(f)
		switch {
		case strings.HasSuffix(base, "_test.go"):
			continue
		case base == "zz_generated.prerelease-lifecycle.go":
			lifecycle = f
			continue
		case strings.HasPrefix(base, "zz_generated") || strings.HasSuffix(base, ".pb.go"):
			continue
		}
		g, ok, err := scanTypes(fsys, f, types)
		if err != nil {
			return nil, err
		}
		if ok && !haveGroup {
			group, haveGroup = g, true
		}
	}
	if !haveGroup {
		if len(types) == 0 {
			return nil, nil // not an API package
		}
		return nil, errNoGroup
	}
	life := map[string]*kindInfo{}
	if lifecycle != "" {
		if err := parseLifecycle(fsys, lifecycle, group, version, life); err != nil {
			return nil, err
		}
	}
	var out []kindInfo
	names := make([]string, 0, len(types))
	for n := range types {
		names = append(names, n)
	}
	for n := range life {
		if _, ok := types[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		tt, isType := types[n]
		k := kindInfo{Group: group, Version: version, Kind: n}
		if l := life[n]; l != nil {
			k = *l
		}
		if isType && tt.genclient && !tt.noVerbs {
			k.Resource = tt.resourceName
			if k.Resource == "" {
				k.Resource = kubeapi.Resource(n)
			}
		}
		if !isType && !k.Tagged {
			continue
		}
		if k.Resource == "" && !k.Tagged {
			continue // a helper struct of the package, not a kind
		}
		out = append(out, k)
	}
	return out, nil
}

type typeTags struct {
	genclient, noVerbs bool
	resourceName       string
}

var groupNameRE = regexp.MustCompile(`^//\s*\+groupName=(\S*)`)

// scanTypes records the client-gen tags in the comment lines above each top-level struct type
// of a Go file, and the +groupName tag or GroupName constant.
func scanTypes(fsys fs.FS, name string, types map[string]typeTags) (group string, haveGroup bool, err error) {
	f, err := fsys.Open(name)
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	var comments []string
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "//"):
			if m := groupNameRE.FindStringSubmatch(line); m != nil && !haveGroup {
				group, haveGroup = m[1], true
			}
			comments = append(comments, line)
			continue
		case line == "":
			comments = append(comments, "")
			continue
		case strings.HasPrefix(line, "const GroupName = "):
			if s, err := strconv.Unquote(strings.TrimPrefix(line, "const GroupName = ")); err == nil && !haveGroup {
				group, haveGroup = s, true
			}
		case strings.HasPrefix(line, "type ") && strings.HasSuffix(line, " struct {"):
			name := strings.Fields(line)[1]
			var tt typeTags
			for _, c := range comments {
				tag := strings.TrimSpace(strings.TrimPrefix(c, "//"))
				switch {
				case tag == "+genclient":
					tt.genclient = true
				case tag == "+genclient:noVerbs":
					tt.noVerbs = true
				case strings.HasPrefix(tag, "+resourceName="):
					tt.resourceName = strings.TrimPrefix(tag, "+resourceName=")
				}
			}
			types[name] = tt
		}
		comments = comments[:0]
	}
	return group, haveGroup, sc.Err()
}

// parseLifecycle reads the APILifecycle* methods of a zz_generated.prerelease-lifecycle.go.
func parseLifecycle(fsys fs.FS, name, group, version string, into map[string]*kindInfo) error {
	src, err := fs.ReadFile(fsys, name)
	if err != nil {
		return err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, 0)
	if err != nil {
		return fmt.Errorf("parse %s: %w", name, err)
	}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv == nil || len(fn.Recv.List) != 1 || fn.Body == nil || len(fn.Body.List) != 1 {
			continue
		}
		star, ok := fn.Recv.List[0].Type.(*ast.StarExpr)
		if !ok {
			continue
		}
		id, ok := star.X.(*ast.Ident)
		if !ok {
			continue
		}
		ret, ok := fn.Body.List[0].(*ast.ReturnStmt)
		if !ok {
			continue
		}
		k := into[id.Name]
		if k == nil {
			k = &kindInfo{Group: group, Version: version, Kind: id.Name, Tagged: true}
			into[id.Name] = k
		}
		pos := fset.Position(fn.Pos())
		switch fn.Name.Name {
		case "APILifecycleIntroduced", "APILifecycleDeprecated", "APILifecycleRemoved":
			v, err := releaseOf(ret)
			if err != nil {
				return fmt.Errorf("%s: %s.%s: %w", pos, id.Name, fn.Name.Name, err)
			}
			switch fn.Name.Name {
			case "APILifecycleIntroduced":
				k.Introduced = v
			case "APILifecycleDeprecated":
				k.Deprecated = v
			default:
				k.Removed = v
			}
		case "APILifecycleReplacement":
			r, err := gvkOf(ret)
			if err != nil {
				return fmt.Errorf("%s: %s.%s: %w", pos, id.Name, fn.Name.Name, err)
			}
			k.Replacement = r
		}
	}
	return nil
}

// releaseOf reads `return MAJOR, MINOR`.
func releaseOf(ret *ast.ReturnStmt) (kubeversion.Version, error) {
	if len(ret.Results) != 2 {
		return kubeversion.Version{}, errors.New("want return MAJOR, MINOR")
	}
	var n [2]int
	for i, r := range ret.Results {
		lit, ok := r.(*ast.BasicLit)
		if !ok || lit.Kind != token.INT {
			return kubeversion.Version{}, errors.New("want integer literals")
		}
		v, err := strconv.Atoi(lit.Value)
		if err != nil {
			return kubeversion.Version{}, err
		}
		n[i] = v
	}
	return kubeversion.Parse(fmt.Sprintf("%d.%d", n[0], n[1]))
}

// gvkOf reads `return schema.GroupVersionKind{Group: "g", Version: "v", Kind: "K"}`.
func gvkOf(ret *ast.ReturnStmt) (gvk, error) {
	var out gvk
	if len(ret.Results) != 1 {
		return out, errors.New("want one result")
	}
	cl, ok := ret.Results[0].(*ast.CompositeLit)
	if !ok {
		return out, errors.New("want a GroupVersionKind literal")
	}
	for _, e := range cl.Elts {
		kv, ok := e.(*ast.KeyValueExpr)
		if !ok {
			return out, errors.New("want keyed fields")
		}
		key, _ := kv.Key.(*ast.Ident)
		lit, _ := kv.Value.(*ast.BasicLit)
		if key == nil || lit == nil || lit.Kind != token.STRING {
			return out, errors.New("want Field: \"string\"")
		}
		s, err := strconv.Unquote(lit.Value)
		if err != nil {
			return out, err
		}
		switch key.Name {
		case "Group":
			out.Group = s
		case "Version":
			out.Version = s
		case "Kind":
			out.Kind = s
		}
	}
	if out.Version == "" || out.Kind == "" {
		return out, errors.New("replacement without version or kind")
	}
	return out, nil
}
