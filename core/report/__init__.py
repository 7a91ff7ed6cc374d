"""What a person takes away: comparison snapshots of stored results, the Pareto frontier,
Plotly figures, the offline HTML report and the deployable bundle.

A new figure, report format or export artefact: here.
"""
