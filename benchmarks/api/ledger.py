"""The prediction ledger's API: a prediction with the runs that measured it, and the accuracy."""
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions
from rest_framework.decorators import api_view
from rest_framework.response import Response

from benchmarks.api import schema
from benchmarks.ledger import selectors


@extend_schema(summary="A prediction: the decision's inputs, each candidate's estimate with its band, and the "
                       "runs that later measured it", responses=OpenApiTypes.OBJECT)
@api_view(["GET"])
def prediction_detail(request, public_id: str):
    p = selectors.prediction_by_public_id(public_id)
    return Response(selectors.prediction_json(p, absolute=request.build_absolute_uri))


@extend_schema(summary="How accurate the estimates were: per GPU × engine × figure, the pairs, the median "
                       "|error|, the share inside the band, and the error before and after the hosts' corrections",
               parameters=[OpenApiParameter("gpu", str, description="a GPU's name, as its pairs give it"),
                           OpenApiParameter("engine", str, enum=list(selectors.ENGINES)),
                           OpenApiParameter("metric", str, enum=list(selectors.CORRECTED))],
               responses={200: OpenApiTypes.OBJECT, 400: schema.Error})
@api_view(["GET"])
def accuracy(request):
    try:
        q = selectors.accuracy_query(request.query_params)
    except selectors.QueryError as e:
        raise exceptions.ValidationError({e.field: [e.message]})
    return Response({"query": q, "groups": selectors.accuracy_groups(q)})
