package config

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// RejectionTextfileEnv names the directory of a Prometheus textfile
// collector (node_exporter --collector.textfile.directory). A process that
// refuses its configuration exits before it can serve /metrics, so it counts
// the rejection there instead: mightyetl_config_rejections_total{binary}.
const RejectionTextfileEnv = "MIGHTYETL_METRICS_TEXTFILE_DIR"

var binaryName = regexp.MustCompile(`^[a-z]+$`)

// RecordRejection adds one to mightyetl_config_rejections_total{binary} in
// dir/mightyetl_<binary>_config_rejections.prom, replacing the file
// atomically. An empty dir does nothing. The file never holds a setting's
// value, only the count.
func RecordRejection(dir, binary string) error {
	if dir == "" {
		return nil
	}
	if !binaryName.MatchString(binary) {
		return fmt.Errorf("record rejection: bad binary name")
	}
	path := filepath.Join(dir, "mightyetl_"+binary+"_config_rejections.prom")
	count := readCount(path) + 1
	tmp, err := os.CreateTemp(dir, ".mightyetl-rejections-*")
	if err != nil {
		return fmt.Errorf("record rejection: %w", err)
	}
	fmt.Fprintf(tmp, "# HELP mightyetl_config_rejections_total Start-up configurations rejected by validation.\n"+
		"# TYPE mightyetl_config_rejections_total counter\n"+
		"mightyetl_config_rejections_total{binary=%q} %d\n", binary, count)
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("record rejection: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("record rejection: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("record rejection: %w", err)
	}
	return nil
}

func readCount(path string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "mightyetl_config_rejections_total{") {
			if i := strings.LastIndexByte(line, ' '); i > 0 {
				n, err := strconv.ParseInt(line[i+1:], 10, 64)
				if err == nil && n >= 0 {
					return n
				}
			}
		}
	}
	return 0
}
