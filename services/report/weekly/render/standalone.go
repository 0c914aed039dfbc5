package render

import (
	"encoding/base64"
	"html/template"

	"github.com/auditlens/auditlens/services/report/weekly"
	"github.com/auditlens/auditlens/services/report/weekly/chart"
)

// DataImages draws the report's charts as data: URLs, for HTML that stands alone (a file, a
// web page) rather than travelling with its images as e-mail parts.
func DataImages(r *weekly.Report) (Images, error) {
	var img Images
	for _, c := range []struct {
		draw func(*weekly.Report) ([]byte, error)
		dst  *template.URL
	}{{chart.Daily, &img.Daily}, {chart.Weekly, &img.Weekly}} {
		b, err := c.draw(r)
		if err != nil {
			return Images{}, err
		}
		*c.dst = template.URL("data:image/png;base64," + base64.StdEncoding.EncodeToString(b))
	}
	return img, nil
}
