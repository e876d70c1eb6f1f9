"""On-demand operator verbs that are not background work: schema drift detection,
reindex commands, async-migration commands, instance administration. Each lands as a
module here, built on the public verbs and ``qcore.sql`` builders."""
