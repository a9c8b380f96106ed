"""Evolution (SPEC 9) in plain Python: the review delta and evidence gate, reviewers, the
reconciler, gates and the review job. The Django side (`evolution_app.models`, `backends`,
`services`, `tasks`, `admin`, `apis`) stores candidates and lets a person decide."""
