-- marts.doc_utility: per file retrieved by at least 2 counted queries: how often it was
-- retrieved (queries), how often its session then committed it, and hit_rate = the ratio.
select
    doc_path,
    count(*)::bigint as times_retrieved,
    count(*) filter (where hit)::bigint as times_committed,
    (count(*) filter (where hit))::double / count(*) as hit_rate,
    min(rank)::bigint as best_rank,
    avg(rank)::double as mean_rank
from marts.retrieval_judgements
group by doc_path
having count(*) >= 2
order by hit_rate desc, times_retrieved desc, doc_path
