package redlock

import (
	"log/slog"
	"slices"
	"strings"
)

// setWarning adds (on) or removes (!on) the configuration warning of the
// given kind ("cluster", "replica", "eviction", ...) in MasterStatus.Warnings,
// stored as "kind: text". Adding one logs it once.
func (m *master) setWarning(kind string, on bool, text string) {
	m.st.mu.Lock()
	defer m.st.mu.Unlock()
	prefix := kind + ": "
	i := slices.IndexFunc(m.st.warnings, func(w string) bool { return strings.HasPrefix(w, prefix) })
	switch {
	case on && i < 0:
		m.st.warnings = append(m.st.warnings, prefix+text)
		m.c.opts.logger.Warn("master misconfigured", masterAttr(m), slog.String("problem", text))
	case !on && i >= 0:
		m.st.warnings = append(m.st.warnings[:i], m.st.warnings[i+1:]...)
	}
}
