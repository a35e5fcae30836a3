package e2bserver

// RoutePatterns lists the control-plane routes, for TestRoutesAuthenticated.
func (s *Server) RoutePatterns() []string {
	var out []string
	for _, r := range s.apiRoutes() {
		out = append(out, r.pattern)
	}
	return out
}
