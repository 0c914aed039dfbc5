package rules

import (
	"net/netip"
	"strconv"
	"strings"

	"github.com/valyala/fastjson"
)

// The IP and CIDR forms that strict validation (KEP-4858, StrictIPCIDRValidation: beta and on
// by default from 1.36) refuses in the legacy fields that used to accept them: IPv4 octets
// with leading zeros ("010.0.0.1", which libc reads as octal), IPv4-mapped IPv6 addresses
// ("::ffff:10.0.0.1") and CIDRs with bits set past the prefix length ("10.0.0.1/8"). A value
// that is not an IP at all is the apiserver's to refuse, not a finding; a non-canonical IPv6
// spelling ("FE80::0ABC") only draws a warning and stays accepted.

// strictIP returns the form the apiserver asks for and true when value is an IP that strict
// validation refuses.
func strictIP(value string) (string, bool) {
	if a, err := netip.ParseAddr(value); err == nil {
		if a.Is4In6() {
			return a.Unmap().String(), true
		}
		return "", false
	}
	if a, ok := sloppyIPv4(value); ok {
		return a.String(), true
	}
	return "", false
}

// strictCIDR returns the form the apiserver asks for and true when value is a CIDR that strict
// validation refuses.
func strictCIDR(value string) (string, bool) {
	if p, err := netip.ParsePrefix(value); err == nil {
		if p.Addr().Is4In6() {
			if bits := p.Bits() - 96; bits >= 0 {
				return netip.PrefixFrom(p.Addr().Unmap(), bits).Masked().String(), true
			}
			return p.Masked().String(), true
		}
		if m := p.Masked(); m != p {
			return m.String(), true
		}
		return "", false
	}
	// Leading zeros in the address or in the prefix length.
	ip, length, ok := strings.Cut(value, "/")
	if !ok || length == "" || len(length) > 4 {
		return "", false
	}
	bits, err := strconv.Atoi(length)
	if err != nil || bits < 0 {
		return "", false
	}
	a, err := netip.ParseAddr(ip)
	if err != nil {
		var sloppy bool
		if a, sloppy = sloppyIPv4(ip); !sloppy {
			return "", false
		}
	}
	if a.Is4In6() {
		a, bits = a.Unmap(), bits-96
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return "", false
	}
	return p.String(), true
}

// sloppyIPv4 parses a dotted quad whose octets may have leading zeros, as the apiserver's
// sloppy parser did (each octet decimal, at most 255).
func sloppyIPv4(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return netip.Addr{}, false
	}
	var b [4]byte
	for i, p := range parts {
		if p == "" || len(p) > 8 {
			return netip.Addr{}, false
		}
		n := 0
		for _, c := range p {
			if c < '0' || c > '9' {
				return netip.Addr{}, false
			}
			n = n*10 + int(c-'0')
		}
		if n > 255 {
			return netip.Addr{}, false
		}
		b[i] = byte(n)
	}
	return netip.AddrFrom4(b), true
}

// ipFields collects the refused values of one object, to be one finding.
type ipFields struct {
	values   []string
	evidence []Evidence
}

// check records value at path when strict validation refuses it (cidr: a CIDR field).
func (f *ipFields) check(path, value string, cidr bool) {
	canon, bad := strictIP(value)
	if cidr {
		canon, bad = strictCIDR(value)
	}
	if !bad {
		return
	}
	f.values = append(f.values, value+" (use "+canon+")")
	f.evidence = append(f.evidence, Evidence{path, value})
}

// array checks every string of the JSON array at path.
func (f *ipFields) array(v *fastjson.Value, path string, cidr bool) {
	if v == nil {
		return
	}
	arr, _ := v.Array()
	for i, x := range arr {
		if s, err := x.StringBytes(); err == nil {
			f.check(path+"["+itoa(i)+"]", string(s), cidr)
		}
	}
}

// report adds the strict-ip-cidr finding of what was collected, if anything.
func (f *ipFields) report(m *matcher) {
	if len(f.values) == 0 {
		return
	}
	fields := make([]string, len(f.evidence))
	for i, e := range f.evidence {
		fields[i] = strings.TrimPrefix(e.Path, m.root+".")
	}
	m.add(StrictIPCIDR, Match{Detail: strings.Join(fields, ", "), Value: strings.Join(f.values, ", "), Evidence: f.evidence})
}

// serviceIPs checks a Service's IP and CIDR fields: its cluster IPs, external IPs and
// load-balancer source ranges (the field and the older annotation, comma-separated).
func (m *matcher) serviceIPs(obj *fastjson.Value) {
	var f ipFields
	if ip := string(obj.GetStringBytes("spec", "clusterIP")); ip != "" && ip != "None" {
		f.check(m.root+".spec.clusterIP", ip, false)
	}
	for i, v := range obj.GetArray("spec", "clusterIPs") {
		// clusterIPs[0] repeats clusterIP: reported once.
		if ip := string(v.GetStringBytes()); ip != "" && ip != "None" && (i > 0 || ip != string(obj.GetStringBytes("spec", "clusterIP"))) {
			f.check(m.root+".spec.clusterIPs["+itoa(i)+"]", ip, false)
		}
	}
	f.array(obj.Get("spec", "externalIPs"), m.root+".spec.externalIPs", false)
	f.array(obj.Get("spec", "loadBalancerSourceRanges"), m.root+".spec.loadBalancerSourceRanges", true)
	const sourceRanges = "service.beta.kubernetes.io/load-balancer-source-ranges"
	if v := string(obj.GetStringBytes("metadata", "annotations", sourceRanges)); v != "" {
		for _, r := range strings.Split(v, ",") {
			f.check(m.root+`.metadata.annotations["`+sourceRanges+`"]`, strings.TrimSpace(r), true)
		}
	}
	f.report(m)
}

// podIPs checks the IPs a pod spec sets itself: DNS nameservers and host aliases.
func (m *matcher) podIPs(spec *fastjson.Value, path string) {
	var f ipFields
	f.array(spec.Get("dnsConfig", "nameservers"), path+".dnsConfig.nameservers", false)
	for i, a := range spec.GetArray("hostAliases") {
		if ip := a.GetStringBytes("ip"); len(ip) > 0 {
			f.check(path+".hostAliases["+itoa(i)+"].ip", string(ip), false)
		}
	}
	f.report(m)
}

// networkPolicy checks the CIDRs of a NetworkPolicy's ipBlocks, ingress and egress.
func (m *matcher) networkPolicy(obj *fastjson.Value) {
	var f ipFields
	for _, dir := range [...][2]string{{"ingress", "from"}, {"egress", "to"}} {
		for i, r := range obj.GetArray("spec", dir[0]) {
			for j, peer := range r.GetArray(dir[1]) {
				b := peer.Get("ipBlock")
				if b == nil {
					continue
				}
				path := m.root + ".spec." + dir[0] + "[" + itoa(i) + "]." + dir[1] + "[" + itoa(j) + "].ipBlock"
				if c := b.GetStringBytes("cidr"); len(c) > 0 {
					f.check(path+".cidr", string(c), true)
				}
				f.array(b.Get("except"), path+".except", true)
			}
		}
	}
	f.report(m)
}
