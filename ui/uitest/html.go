// Package uitest reads the status page's HTML in tests: the ui package's
// own and the command-line tests that load the page from a running
// ackflow. It is not part of ackflow's API.
package uitest

import (
	"strings"

	"golang.org/x/net/html"
)

// Elements returns the element nodes under n that ok accepts, in
// document order.
func Elements(n *html.Node, ok func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	for c := range n.Descendants() {
		if c.Type == html.ElementNode && ok(c) {
			out = append(out, c)
		}
	}
	return out
}

// Attr returns n's attribute key, or "".
func Attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

// Text returns the text under n, trimmed.
func Text(n *html.Node) string {
	var b strings.Builder
	for c := range n.Descendants() {
		if c.Type == html.TextNode {
			b.WriteString(c.Data)
		}
	}
	return strings.TrimSpace(b.String())
}

// Field returns the text of the first element under n whose data-field
// is name, and whether there is one.
func Field(n *html.Node, name string) (string, bool) {
	if fs := Elements(n, func(c *html.Node) bool { return Attr(c, "data-field") == name }); len(fs) > 0 {
		return Text(fs[0]), true
	}
	return "", false
}
